package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// chunk is what the load generator reads of one streamed event: each
// choice's text (a completion's text, or a chat delta's content) and
// finish_reason, and the usage when the event carries it.
type chunk struct {
	// texts are the choices' texts, each the bytes of the event (valid
	// until the next read) unless it held an escape; finishes their
	// finish_reason ("" for null or none).
	texts    [][]byte
	finishes []string
	// spans are where each text's string literal lies in the event,
	// when the text is that literal's bytes as they are (chunkReader's
	// template).
	spans    []span
	hasUsage bool
	// The usage's counts.
	promptTokens, completionTokens int
}

// span is where a string literal's bytes lie in an event: from the byte
// after its opening quote to its closing quote. ok is false when no
// single literal holds the text as it is (no text field, an escape, or a
// text and a delta's content both given).
type span struct {
	from, to int
	ok       bool
}

// errSyntax is the cause of a chunk that is not the JSON of an event.
var errSyntax = errors.New("not valid JSON")

// chunkReader reads a stream's events, each into c. An engine streams the
// same event over and over with only the token's text changed, so the
// reader keeps the last event it read in full whose one choice's text is
// a string literal as it is (the template) and reads a next event that
// is the template's bytes with only that literal's content changed
// without parsing it again: the bytes before the literal and from its
// closing quote on must equal the template's, and the content between
// must be plain printable ASCII without a quote or a backslash (so the
// literal still ends at the template's closing quote). Such an event is
// valid JSON with the template's structure, finish_reason and usage, and
// the new content as its text, exactly what parseChunk would read of it
// (TestChunkReaderReadsWhatParseChunkReads, FuzzChunkReader). Any other
// event, malformed ones included, is read in full by parseChunk.
type chunkReader struct {
	c chunk
	// tmpl is a copy of the template; its text's literal is
	// tmpl[from:to]. ok says whether there is one.
	tmpl     []byte
	from, to int
	ok       bool
	// reused counts the events read from the template.
	reused int
}

// reset forgets the template (a new stream).
func (r *chunkReader) reset() { r.ok = false }

// read reads one event into r.c, whose texts are valid until the next
// read or until data changes.
func (r *chunkReader) read(data []byte) error {
	if r.ok && len(data) >= len(r.tmpl)-(r.to-r.from) &&
		bytes.Equal(data[:r.from], r.tmpl[:r.from]) && bytes.Equal(data[len(data)-(len(r.tmpl)-r.to):], r.tmpl[r.to:]) {
		body := data[r.from : len(data)-(len(r.tmpl)-r.to)]
		if plain(body) {
			r.c.texts[0] = body
			r.reused++
			return nil
		}
	}
	if err := parseChunk(data, &r.c); err != nil {
		r.ok = false // r.c is half read
		return err
	}
	r.ok = len(r.c.texts) == 1 && r.c.spans[0].ok
	if r.ok {
		r.tmpl = append(r.tmpl[:0], data...)
		r.from, r.to = r.c.spans[0].from, r.c.spans[0].to
	}
	return nil
}

// plain reports whether b is a string literal's content as it is, with
// no quote, backslash, control character or byte beyond ASCII.
func plain(b []byte) bool {
	for _, c := range b {
		if strStop[c] {
			return false
		}
	}
	return true
}

// role is what an open object or array is in an event: the fields read
// are those of the event, its choices, a choice, its delta and the usage;
// everything else (roleOther) is checked and passed.
type role uint8

const (
	roleOther role = iota
	roleEvent
	roleChoices
	roleChoice
	roleDelta
	roleUsage
)

// target is what the value about to be read is: which field it fills, and
// so which JSON types it may be (a field of the wrong type is an error, as
// encoding/json's *UnmarshalTypeError).
type target uint8

const (
	tgtOther      target = iota // any value, passed
	tgtEvent                    // the event: an object
	tgtChoices                  // choices: an array or null
	tgtChoice                   // an element of choices: an object
	tgtText                     // text: a string or null
	tgtFinish                   // finish_reason: a string or null
	tgtDelta                    // delta: an object or null
	tgtContent                  // delta.content: a string or null
	tgtUsage                    // usage: an object or null
	tgtPrompt                   // usage.prompt_tokens: an integer
	tgtCompletion               // usage.completion_tokens: an integer
)

// want names the types a target takes, for the error.
var want = [...]string{
	tgtEvent: "an object", tgtChoices: "an array or null", tgtChoice: "an object", tgtText: "a string or null",
	tgtFinish: "a string or null", tgtDelta: "an object or null", tgtContent: "a string or null",
	tgtUsage: "an object or null", tgtPrompt: "a count", tgtCompletion: "a count",
}

// frame is an open object (obj) or array.
type frame struct {
	obj  bool
	role role
}

// The reader's states between two tokens.
const (
	stValue      = iota // a value (of target tgt)
	stKeyOrEnd          // just after '{': a key or '}'
	stKey               // after ',' in an object: a key
	stColon             // after a key
	stCommaOrEnd        // after a value in an object or array
	stElemOrEnd         // just after '[': a value or ']'
)

// parseChunk reads one event's JSON into c (reset first), in one pass over
// the bytes in one loop, without reflection, closures or a call per
// token: the fields the load generator needs are read, every other value
// is checked and skipped. Anything that is not a JSON object, or a field
// of the wrong type, is an error: the caller's engine_bad_stream. Keys
// match as encoding/json matches them (without regard to case; a key
// twice, its last value), and the texts read are encoding/json's
// (TestParseChunkReadsWhatEncodingJSONReads, FuzzParseChunk). It is the
// load generator's cost per token beside a client that checks nothing
// (BenchmarkCeilingVsMinimal), so it is written as a state machine whose
// position stays in a register.
//
// What it saves, measured (BenchmarkParseChunk, one 182-byte vLLM
// completion chunk, 5 runs on 2 shared cores, 2026-12-06):
//
//	encoding/json into refChunk  2,580-3,490 ns/op  384 B  10 allocs
//	parseChunk                     500-730 ns/op    0 B   0 allocs  (about 4.6x less)
//	chunkReader, from template      20-25 ns/op    0 B   0 allocs  (about 140x less)
//
// A streaming engine sends one such chunk per token, so encoding/json
// alone would cost about 3 µs of CPU a token, a ceiling near 340k tokens/s
// a core before any HTTP work.
func parseChunk(data []byte, c *chunk) error { //nolint:gocyclo // a hand-written JSON state machine kept for speed (see the doc comment; FuzzParseChunk checks it against encoding/json)
	c.texts, c.finishes, c.spans, c.hasUsage, c.promptTokens, c.completionTokens = c.texts[:0], c.finishes[:0], c.spans[:0], false, 0, 0
	var stackBuf [8]frame
	stack := stackBuf[:0]
	// The open choice's fields: only one is open at a time (a choice
	// inside a choice is not read).
	var text, content []byte
	var textAt, contentAt span
	finish := ""
	st, tgt := stValue, tgtEvent
	i, n := 0, len(data)
	for {
		for i < n && data[i] <= ' ' && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t') {
			i++
		}
		if i == n {
			return fmt.Errorf("%w: the event ends early", errSyntax)
		}
		ch := data[i]
		switch st {
		case stKeyOrEnd, stKey:
			if ch == '}' && st == stKeyOrEnd {
				i++
				break // closed below
			}
			if ch != '"' {
				return fmt.Errorf("%w: want a key at byte %d", errSyntax, i)
			}
			key, next, _, err := str(data, i)
			if err != nil {
				return err
			}
			i, st = next, stColon
			switch stack[len(stack)-1].role {
			case roleEvent:
				switch {
				case keyIs(key, "choices"):
					tgt = tgtChoices
				case keyIs(key, "usage"):
					tgt = tgtUsage
				default:
					tgt = tgtOther
				}
			case roleChoice:
				switch {
				case keyIs(key, "text"):
					tgt = tgtText
				case keyIs(key, "finish_reason"):
					tgt = tgtFinish
				case keyIs(key, "delta"):
					tgt = tgtDelta
				default:
					tgt = tgtOther
				}
			case roleDelta:
				tgt = tgtOther
				if keyIs(key, "content") {
					tgt = tgtContent
				}
			case roleUsage:
				switch {
				case keyIs(key, "prompt_tokens"):
					tgt = tgtPrompt
				case keyIs(key, "completion_tokens"):
					tgt = tgtCompletion
				default:
					tgt = tgtOther
				}
			default:
				tgt = tgtOther
			}
			continue
		case stColon:
			if ch != ':' {
				return fmt.Errorf("%w: want ':' at byte %d", errSyntax, i)
			}
			i, st = i+1, stValue
			continue
		case stCommaOrEnd:
			top := stack[len(stack)-1]
			switch {
			case ch == ',' && top.obj:
				i, st = i+1, stKey
				continue
			case ch == ',':
				i, st, tgt = i+1, stValue, elemTarget(top.role)
				continue
			case ch == '}' && top.obj, ch == ']' && !top.obj:
				i++
			case top.obj:
				return fmt.Errorf("%w: want ',' or '}' at byte %d", errSyntax, i)
			default:
				return fmt.Errorf("%w: want ',' or ']' at byte %d", errSyntax, i)
			}
		case stElemOrEnd:
			if ch == ']' {
				i++
				break // closed below
			}
			tgt = elemTarget(stack[len(stack)-1].role) // st is stValue's, below
			fallthrough
		case stValue:
			switch {
			case ch == '{':
				var r role
				switch tgt {
				case tgtEvent:
					r = roleEvent
				case tgtChoice:
					r, text, content, finish = roleChoice, nil, nil, ""
					textAt, contentAt = span{}, span{}
				case tgtDelta:
					r = roleDelta
				case tgtUsage:
					r, c.hasUsage = roleUsage, true
				case tgtOther:
					r = roleOther
				default:
					return typeError(tgt, i)
				}
				stack = append(stack, frame{obj: true, role: r})
				i, st = i+1, stKeyOrEnd
				continue
			case ch == '[':
				r := roleOther
				switch tgt {
				case tgtChoices:
					// A key given twice counts once, its last value
					// (as encoding/json reads it).
					r, c.texts, c.finishes, c.spans = roleChoices, c.texts[:0], c.finishes[:0], c.spans[:0]
				case tgtOther:
				default:
					return typeError(tgt, i)
				}
				stack = append(stack, frame{role: r})
				i, st = i+1, stElemOrEnd
				continue
			case ch == '"':
				s, next, raw, err := str(data, i)
				if err != nil {
					return err
				}
				switch tgt {
				case tgtText:
					text, textAt = s, span{i + 1, next - 1, raw}
				case tgtContent:
					content, contentAt = s, span{i + 1, next - 1, raw}
				case tgtFinish:
					finish = finishReason(s)
				case tgtOther:
				default:
					return typeError(tgt, i)
				}
				i = next
			case ch == 'n' && n-i >= 4 && string(data[i:i+4]) == "null":
				// A null leaves a string field as it is, as
				// encoding/json does; the counts and the
				// event and its choices must be there.
				switch tgt {
				case tgtChoices:
					c.texts, c.finishes, c.spans = c.texts[:0], c.finishes[:0], c.spans[:0]
				case tgtUsage:
					c.hasUsage = false
				case tgtFinish:
					finish = ""
				case tgtEvent, tgtChoice, tgtPrompt, tgtCompletion:
					return typeError(tgt, i)
				}
				i += 4
			case ch == 't' && n-i >= 4 && string(data[i:i+4]) == "true",
				ch == 'f' && n-i >= 5 && string(data[i:i+5]) == "false":
				if tgt != tgtOther {
					return typeError(tgt, i)
				}
				if ch == 't' {
					i += 4
				} else {
					i += 5
				}
			case ch == '-' || (ch >= '0' && ch <= '9'):
				end, err := number(data, i)
				if err != nil {
					return err
				}
				switch tgt {
				case tgtPrompt, tgtCompletion:
					v, err := strconv.Atoi(string(data[i:end]))
					if err != nil {
						return fmt.Errorf("%w: %s is not a count", errSyntax, data[i:end])
					}
					if tgt == tgtPrompt {
						c.promptTokens = v
					} else {
						c.completionTokens = v
					}
				case tgtOther:
				default:
					return typeError(tgt, i)
				}
				i = end
			default:
				return fmt.Errorf("%w: no value at byte %d", errSyntax, i)
			}
			// A scalar was read, inside the event (the event itself
			// is an object: tgtEvent refused any scalar above).
			st = stCommaOrEnd
			continue
		}
		// An object or array was closed (its '}' or ']' read).
		if stack[len(stack)-1].role == roleChoice {
			at := textAt
			switch {
			case len(content) == 0:
			case len(text) == 0:
				text, at = content, contentAt
			default:
				text, at = append(append([]byte(nil), text...), content...), span{}
			}
			c.texts = append(c.texts, text)
			c.finishes = append(c.finishes, finish)
			c.spans = append(c.spans, at)
		}
		stack = stack[:len(stack)-1]
		st = stCommaOrEnd
		if len(stack) == 0 {
			break
		}
	}
	for i < n && data[i] <= ' ' && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t') {
		i++
	}
	if i != n {
		return fmt.Errorf("%w: more after the event's end", errSyntax)
	}
	return nil
}

// elemTarget is what the elements of an array of role r are.
func elemTarget(r role) target {
	if r == roleChoices {
		return tgtChoice
	}
	return tgtOther
}

func typeError(t target, at int) error {
	return fmt.Errorf("%w: want %s at byte %d", errSyntax, want[t], at)
}

// finishReason is a finish_reason's string; the reasons engines give are
// not allocated anew for every request.
func finishReason(f []byte) string {
	switch string(f) {
	case "length":
		return "length"
	case "stop":
		return "stop"
	}
	return string(f)
}

// keyIs matches a key to a field's name (lower case ASCII) as
// encoding/json does: exactly, or without regard to case (Unicode's
// simple folding). Keys of ASCII are compared here byte by byte; only a
// key with a byte beyond ASCII before its first difference (the Kelvin
// sign folds to k, the long s to s) goes to strings.EqualFold.
func keyIs(key []byte, name string) bool {
	n := min(len(key), len(name))
	for i := range n {
		k, c := key[i], name[i]
		switch {
		case k == c:
		case k >= utf8.RuneSelf:
			return strings.EqualFold(string(key), name)
		case 'A' <= k && k <= 'Z' && k+('a'-'A') == c:
		default:
			// Both ASCII, aligned (every byte before matched one
			// for one), and not the same letter.
			return false
		}
	}
	if len(key) > n {
		for _, k := range key[n:] {
			if k >= utf8.RuneSelf {
				return strings.EqualFold(string(key), name)
			}
		}
	}
	return len(key) == len(name)
}

// strStop marks the bytes that end the fast scan of a string: its closing
// quote, an escape, a control character (an error) and the bytes beyond
// ASCII (checked as UTF-8).
var strStop = func() (t [256]bool) {
	for c := range t {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf
	}
	return t
}()

// str reads the string whose opening quote is at data[i] and returns it
// and the index after its closing quote: its bytes as they are (raw) when
// it holds no escape and is valid UTF-8, else decoded as encoding/json
// decodes them (escapes resolved, invalid UTF-8 replaced). The bytes of
// plain ASCII, which is nearly every string of an event, are passed by one
// table look-up each.
func str(data []byte, i int) (s []byte, next int, raw bool, err error) {
	start := i + 1
	j := start
	for j < len(data) && !strStop[data[j]] {
		j++
	}
	if j < len(data) && data[j] == '"' {
		return data[start:j], j + 1, true, nil
	}
	return strRest(data, start, j)
}

// strRest is str past the first byte that is not plain ASCII, at j.
func strRest(data []byte, start, j int) ([]byte, int, bool, error) {
	escaped, nonASCII := false, false
	for j < len(data) {
		switch c := data[j]; {
		case c == '"':
			raw := data[start:j]
			if !escaped && (!nonASCII || utf8.Valid(raw)) {
				return raw, j + 1, true, nil
			}
			var s string
			if err := json.Unmarshal(data[start-1:j+1], &s); err != nil {
				return nil, 0, false, fmt.Errorf("%w: %w", errSyntax, err)
			}
			return []byte(s), j + 1, false, nil
		case c == '\\':
			escaped = true
			j += 2
		case c < 0x20:
			return nil, 0, false, fmt.Errorf("%w: a control character in a string at byte %d", errSyntax, j)
		default:
			nonASCII = nonASCII || c >= utf8.RuneSelf
			j++
		}
	}
	return nil, 0, false, fmt.Errorf("%w: a string does not end", errSyntax)
}

// number checks the grammar of the number that starts at data[i] and
// returns the index after it.
func number(data []byte, i int) (int, error) {
	start := i
	if data[i] == '-' {
		i++
	}
	digits := func() int {
		from := i
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		return i - from
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case digits() == 0:
		return 0, fmt.Errorf("%w: want a number at byte %d", errSyntax, start)
	}
	if i < len(data) && data[i] == '.' {
		i++
		if digits() == 0 {
			return 0, fmt.Errorf("%w: a number without digits after its point at byte %d", errSyntax, start)
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0, fmt.Errorf("%w: a number without digits in its exponent at byte %d", errSyntax, start)
		}
	}
	return i, nil
}
