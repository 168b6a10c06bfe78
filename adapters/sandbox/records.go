package sandbox

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
)

// splitter is a run's stdout as the grader reads it: the harness's
// records, each on a line of its own after "\n" and the run's mark and a
// space, apart from everything else, of which the last bytes are kept.
// It is written by one goroutine (exec's copy of stdout).
type splitter struct {
	// sep is "\n" + mark + " ".
	sep []byte
	out *tail
	// pending is the end of what was written that may begin sep.
	pending []byte
	// inRecord reports that a record is being read into rec; drop that
	// it is dropped (past maxRecords).
	inRecord, drop bool
	rec            []byte
	records        []string
	size           int
	// over reports that records were dropped past maxRecords. A record
	// cut short by the end of the output (a run killed as it wrote) is
	// dropped too, as never written.
	over bool
}

func newSplitter(mark string, keep int) *splitter {
	return &splitter{sep: []byte("\n" + mark + " "), out: newTail(keep)}
}

// Write splits p between the records and the kept output; it never
// fails.
func (s *splitter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if s.inRecord {
			line, rest, found := bytes.Cut(p, []byte{'\n'})
			if s.size+len(s.rec)+len(line) > maxRecords {
				s.drop = true
			}
			if !s.drop {
				s.rec = append(s.rec, line...)
			}
			if !found {
				return n, nil
			}
			if s.drop {
				s.over = true
			} else {
				s.records = append(s.records, string(s.rec))
				s.size += len(s.rec)
			}
			s.rec, s.inRecord, s.drop = s.rec[:0], false, false
			p = rest
			continue
		}
		data := p
		if len(s.pending) > 0 {
			data = append(s.pending, p...)
			s.pending = nil
		}
		if i := bytes.Index(data, s.sep); i >= 0 {
			_, _ = s.out.Write(data[:i])
			s.inRecord = true
			p = data[i+len(s.sep):]
			continue
		}
		k := partialSuffix(data, s.sep)
		_, _ = s.out.Write(data[:len(data)-k])
		s.pending = bytes.Clone(data[len(data)-k:])
		return n, nil
	}
	return n, nil
}

// end ends the output: what may have begun a record was output, and a
// record left without its line's end is dropped.
func (s *splitter) end() {
	_, _ = s.out.Write(s.pending)
	s.pending = nil
	s.rec, s.inRecord = nil, false
}

// partialSuffix is the length of the longest end of data that begins sep
// (shorter than sep).
func partialSuffix(data, sep []byte) int {
	for k := min(len(data), len(sep)-1); k > 0; k-- {
		if bytes.HasPrefix(sep, data[len(data)-k:]) {
			return k
		}
	}
	return 0
}

// readCapped reads r to its end, keeping the first max bytes; over
// reports that there were more.
func readCapped(r io.Reader, max int) (data []byte, over bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		keep := min(n, max-len(data))
		data = append(data, buf[:keep]...)
		if n > keep {
			over = true
		}
		if err != nil {
			return data, over
		}
	}
}

// check is one of an item's checks, as the prelude reported it.
type check struct {
	// line is the assert's line in the tests.
	line int
	// ne: the check passes when the result is not want.
	ne   bool
	want value
	// src is the assert's condition, msg its message.
	src, msg string
}

// errReport is a report of the prelude that cannot be read: the grader's
// failure, never the answer's.
var errReport = errors.New("the prelude's report cannot be read")

// parseReport reads the prelude's report: the checks, or why the tests
// cannot be judged (bad).
func parseReport(report []byte) (checks []check, bad string, err error) {
	lines := strings.Split(string(report), "\n")
	if len(lines) < 2 || lines[len(lines)-1] != "" {
		return nil, "", fmt.Errorf("%w: %d bytes without their end", errReport, len(report))
	}
	lines = lines[:len(lines)-1]
	if why, ok := strings.CutPrefix(lines[0], "bad "); ok && len(lines) == 1 {
		b, err := hex.DecodeString(why)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", errReport, err)
		}
		return nil, clean(string(b), 600), nil
	}
	if lines[len(lines)-1] != "ok" {
		return nil, "", fmt.Errorf("%w: no end", errReport)
	}
	for _, line := range lines[:len(lines)-1] {
		f := strings.Split(line, " ")
		if len(f) != 6 || f[0] != "check" || (f[2] != "eq" && f[2] != "ne") {
			return nil, "", fmt.Errorf("%w: %q", errReport, clean(line, 100))
		}
		c := check{ne: f[2] == "ne"}
		var src, msg []byte
		c.line, err = strconv.Atoi(f[1])
		if err == nil {
			c.want, err = parseValue(f[3])
		}
		if err == nil {
			src, err = hex.DecodeString(f[4])
		}
		if err == nil {
			msg, err = hex.DecodeString(f[5])
		}
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", errReport, err)
		}
		c.src, c.msg = string(src), string(msg)
		checks = append(checks, c)
	}
	return checks, "", nil
}

// result is what the program's function gave for one check: a built-in
// value, or why it is not one.
type result struct {
	got     value
	refused string
}

// readResults reads the harness's records: the results of the checks in
// order, whether the harness reached its end, and what is wrong with the
// records (only a program that forged them, or a grader's fault, writes
// such: they fail the answer).
func readResults(records []string, checks int) (results []result, end bool, problem string) {
	for _, rec := range records {
		if end {
			return results, false, "a result after the end of the tests"
		}
		if rec == "end" {
			if len(results) != checks {
				return results, false, fmt.Sprintf("the tests ended after %d of %d checks", len(results), checks)
			}
			end = true
			continue
		}
		head, body, _ := strings.Cut(rec, " ")
		if len(head) < 2 || (head[0] != 'r' && head[0] != 'x') {
			return results, false, fmt.Sprintf("an unknown result %q", clean(rec, 40))
		}
		if i, err := strconv.Atoi(head[1:]); err != nil || i != len(results) || i >= checks || strconv.Itoa(i) != head[1:] {
			return results, false, fmt.Sprintf("a result out of order (%q)", clean(head, 40))
		}
		var r result
		if head[0] == 'x' {
			why, err := hex.DecodeString(body)
			if err != nil {
				return results, false, "a malformed result"
			}
			r.refused = clean(string(why), 400)
		} else {
			v, err := parseValue(body)
			if err != nil {
				return results, false, "a malformed result: " + err.Error()
			}
			r.got = v
		}
		results = append(results, r)
	}
	return results, end, ""
}

// failure says how r fails c, or ok.
func (c check) failure(r result) (detail string, ok bool) {
	var got string
	switch {
	case r.refused != "":
		got = r.refused
	case equal(c.want, r.got) != c.ne:
		return "", true
	default:
		got = r.got.String()
	}
	where := fmt.Sprintf("line %d: assert %s: got %s", c.line, clean(c.src, 120), got)
	if c.msg != "" {
		return "AssertionError: " + clean(c.msg, 200) + " (" + where + ")", false
	}
	return where, false
}

// clean makes text from a run fit a Detail: valid UTF-8 on one line, at
// most max bytes.
func clean(s string, max int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) > max {
		cut := max
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
