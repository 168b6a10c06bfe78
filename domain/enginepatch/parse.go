package enginepatch

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
)

// filePatch is one file of a patch, its names already stripped of their
// a/ b/ (or diff -ru folder) prefixes.
type filePatch struct {
	// oldName and newName are the file before and after; "" is
	// /dev/null (a new or a deleted file).
	oldName, newName string
	// rename and copy: oldName becomes (or is copied to) newName.
	rename, copy bool
	// created and deleted say so explicitly (git's headers, /dev/null);
	// a diff -N file is recognised when applied.
	created, deleted bool
	// epochNew: the +++ line's time is the epoch, as diff -N writes it
	// for a file that is gone.
	epochNew bool
	// binary: a GIT binary patch or a "Binary files ... differ" line.
	binary bool
	// mode is a git mode named for the new file ("100644"), or "".
	mode  string
	hunks []hunk
	// line is the patch's line (from 1) where the file starts.
	line int
}

// name is the file as messages name it.
func (f *filePatch) name() string {
	if f.newName != "" {
		return f.newName
	}
	return f.oldName
}

// hunk is one @@ hunk; its lines carry their own line ends ("\n", or
// none for a line followed by "\ No newline at end of file").
type hunk struct {
	oldStart, oldLines, newStart, newLines int
	header                                 string
	lines                                  []hunkLine
	// n is the hunk's number in its file, from 1.
	n int
}

type hunkLine struct {
	op   byte // ' ', '-' or '+'
	text string
}

var hunkHeader = regexp.MustCompile(`^@@ -([0-9]+)(?:,([0-9]+))? \+([0-9]+)(?:,([0-9]+))? @@`)

// parse reads a whole patch. It refuses an empty patch or one that is
// not a unified diff (reason.PatchMalformed) and content with NUL bytes
// (reason.PatchBinary); it does not look at the paths.
func parse(patch []byte) ([]*filePatch, error) {
	if i := bytes.IndexByte(patch, 0); i >= 0 {
		return nil, refuse(reason.PatchBinary, "the patch holds a NUL byte at line %d: binary content cannot be patched in", bytes.Count(patch[:i], []byte("\n"))+1)
	}
	if len(bytes.TrimSpace(patch)) == 0 {
		return nil, refuse(reason.PatchMalformed, "the patch is empty; write it with git diff or diff -ruN against the pinned engine source")
	}
	lines := strings.SplitAfter(string(patch), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	p := &parser{lines: lines}
	for p.i < len(p.lines) {
		if err := p.next(); err != nil {
			return nil, err
		}
	}
	if len(p.files) == 0 {
		return nil, refuse(reason.PatchMalformed, "the patch holds no file diff (no \"--- \"/\"+++ \" pair or diff --git header); write it with git diff or diff -ruN")
	}
	return p.files, nil
}

type parser struct {
	lines []string
	i     int
	files []*filePatch
}

// header returns line i without its line end.
func (p *parser) header(i int) string {
	return strings.TrimRight(p.lines[i], "\r\n")
}

func (p *parser) next() error {
	l := p.header(p.i)
	switch {
	case strings.HasPrefix(l, "diff --git "):
		return p.gitFile()
	case strings.HasPrefix(l, "--- ") && p.i+1 < len(p.lines) && strings.HasPrefix(p.header(p.i+1), "+++ "):
		f := &filePatch{line: p.i + 1}
		if err := p.names(f, false); err != nil {
			return err
		}
		p.files = append(p.files, f)
		return p.hunks(f)
	case strings.HasPrefix(l, "Binary files ") && strings.HasSuffix(l, " differ"):
		p.files = append(p.files, &filePatch{binary: true, oldName: l, line: p.i + 1})
		p.i++
		return nil
	case l == "GIT binary patch":
		p.files = append(p.files, &filePatch{binary: true, oldName: "(a file)", line: p.i + 1})
		p.i++
		return nil
	case strings.HasPrefix(l, "Only in "):
		return refuse(reason.PatchMalformed, "line %d: %q: a file only one side has is left out of the patch; write it with diff -ruN (or git diff)", p.i+1, l)
	case strings.HasPrefix(l, "@@ "):
		return refuse(reason.PatchMalformed, "line %d: a hunk outside any file (no \"--- \"/\"+++ \" header before it)", p.i+1)
	}
	// Anything else before or between files (a commit message, a
	// "diff -ru" or "index" line) is not the patch's, as for git apply.
	p.i++
	return nil
}

// gitFile reads a file of a git diff: its header, extended header lines,
// ---/+++ lines and hunks.
func (p *parser) gitFile() error {
	f := &filePatch{line: p.i + 1}
	a, b, ok := gitHeaderNames(strings.TrimPrefix(p.header(p.i), "diff --git "))
	if !ok {
		return refuse(reason.PatchMalformed, "line %d: cannot read the file names of %q", p.i+1, p.header(p.i))
	}
	prefixed := strings.HasPrefix(a, "a/") && strings.HasPrefix(b, "b/")
	strip := func(name, prefix string) string {
		if prefixed {
			return strings.TrimPrefix(name, prefix)
		}
		return name
	}
	f.oldName, f.newName = strip(a, "a/"), strip(b, "b/")
	p.i++
	for p.i < len(p.lines) {
		l := p.header(p.i)
		var err error
		switch {
		case strings.HasPrefix(l, "old mode "), strings.HasPrefix(l, "index "),
			strings.HasPrefix(l, "similarity index "), strings.HasPrefix(l, "dissimilarity index "):
		case strings.HasPrefix(l, "new mode "):
			f.mode = strings.TrimPrefix(l, "new mode ")
		case strings.HasPrefix(l, "new file mode "):
			f.created, f.mode = true, strings.TrimPrefix(l, "new file mode ")
		case strings.HasPrefix(l, "deleted file mode "):
			f.deleted = true
		case strings.HasPrefix(l, "rename from "):
			f.rename = true
			f.oldName, err = unquote(strings.TrimPrefix(l, "rename from "), p.i)
		case strings.HasPrefix(l, "rename to "):
			f.rename = true
			f.newName, err = unquote(strings.TrimPrefix(l, "rename to "), p.i)
		case strings.HasPrefix(l, "copy from "):
			f.copy = true
			f.oldName, err = unquote(strings.TrimPrefix(l, "copy from "), p.i)
		case strings.HasPrefix(l, "copy to "):
			f.copy = true
			f.newName, err = unquote(strings.TrimPrefix(l, "copy to "), p.i)
		case l == "GIT binary patch" || strings.HasPrefix(l, "Binary files "):
			f.binary = true
		case strings.HasPrefix(l, "--- "):
			if p.i+1 >= len(p.lines) || !strings.HasPrefix(p.header(p.i+1), "+++ ") {
				return refuse(reason.PatchMalformed, "line %d: a \"--- \" line with no \"+++ \" line after it", p.i+1)
			}
			old, nw := f.oldName, f.newName
			if err := p.names(f, prefixed); err != nil {
				return err
			}
			if f.oldName == "" && f.newName == "" {
				return refuse(reason.PatchMalformed, "line %d: both sides of %s are /dev/null", f.line, nw)
			}
			// The ---/+++ names must be the header's (git writes them so).
			if (f.oldName != "" && f.oldName != old) || (f.newName != "" && f.newName != nw) {
				return refuse(reason.PatchMalformed, "line %d: the ---/+++ names (%s, %s) are not the diff --git header's (%s, %s)", f.line, f.oldName, f.newName, old, nw)
			}
			f.created = f.created || f.oldName == ""
			f.deleted = f.deleted || f.newName == ""
			if f.oldName == "" {
				f.oldName = old
			}
			if f.newName == "" {
				f.newName = nw
			}
			p.files = append(p.files, f)
			return p.hunks(f)
		default:
			// The next file, or text after the patch.
			p.files = append(p.files, f)
			return err
		}
		if err != nil {
			return err
		}
		p.i++
	}
	p.files = append(p.files, f)
	return nil
}

// gitHeaderNames splits the names of a diff --git line: quoted names, or
// two equal names (a/P b/P, or P P without prefixes).
func gitHeaderNames(s string) (string, string, bool) {
	if strings.HasPrefix(s, `"`) {
		a, rest, ok := splitQuoted(s)
		if !ok || !strings.HasPrefix(rest, " ") {
			return "", "", false
		}
		rest = rest[1:]
		if strings.HasPrefix(rest, `"`) {
			b, tail, ok := splitQuoted(rest)
			return a, b, ok && tail == ""
		}
		return a, rest, true
	}
	if strings.HasPrefix(s, "a/") {
		for i := strings.Index(s, " b/"); i >= 0; {
			if s[2:i] == s[i+3:] {
				return s[:i], s[i+1:], true
			}
			j := strings.Index(s[i+1:], " b/")
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	if len(s)%2 == 1 && s[len(s)/2] == ' ' && s[:len(s)/2] == s[len(s)/2+1:] {
		return s[:len(s)/2], s[len(s)/2+1:], true
	}
	// A rename names two different files: the rename lines name them.
	if i := strings.Index(s, " "); i > 0 && !strings.Contains(s[i+1:], " ") {
		return s[:i], s[i+1:], true
	}
	return "", "", false
}

// splitQuoted reads a C-quoted name at the start of s.
func splitQuoted(s string) (string, string, bool) {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			name, err := strconv.Unquote(s[:i+1])
			return name, s[i+1:], err == nil
		}
	}
	return "", "", false
}

func unquote(name string, i int) (string, error) {
	if !strings.HasPrefix(name, `"`) {
		return name, nil
	}
	s, rest, ok := splitQuoted(name)
	if !ok || rest != "" {
		return "", refuse(reason.PatchMalformed, "line %d: cannot read the quoted name %s", i+1, name)
	}
	return s, nil
}

// names reads a ---/+++ pair into f. For a git diff, gitPrefixed says to
// strip a/ and b/; otherwise the prefixes are worked out from the pair.
func (p *parser) names(f *filePatch, gitPrefixed bool) error {
	oldName, _, err := headerName(p.header(p.i), "--- ", p.i)
	if err != nil {
		return err
	}
	newName, newTime, err := headerName(p.header(p.i+1), "+++ ", p.i+1)
	if err != nil {
		return err
	}
	p.i += 2
	if oldName == "/dev/null" {
		oldName = ""
	}
	if newName == "/dev/null" {
		newName = ""
	}
	switch {
	case gitPrefixed:
		oldName, newName = strings.TrimPrefix(oldName, "a/"), strings.TrimPrefix(newName, "b/")
	case oldName != "" && newName != "":
		oldName, newName = stripPair(oldName, newName)
	case oldName != "":
		oldName = stripOne(oldName)
	case newName != "":
		newName = stripOne(newName)
	default:
		return refuse(reason.PatchMalformed, "line %d: both sides of a file are /dev/null", p.i-1)
	}
	f.oldName, f.newName = oldName, newName
	f.created, f.deleted = oldName == "", newName == ""
	f.epochNew = strings.HasPrefix(newTime, "1970-01-01") || strings.HasPrefix(newTime, "1969-12-31")
	return nil
}

// headerName reads the name and time of a ---/+++ line: the name ends at
// a tab (diff writes the time after one).
func headerName(l, prefix string, i int) (string, string, error) {
	rest := strings.TrimPrefix(l, prefix)
	name, when, _ := strings.Cut(rest, "\t")
	if strings.HasPrefix(name, `"`) {
		n, err := unquote(name, i)
		return n, when, err
	}
	if name == "" {
		return "", "", refuse(reason.PatchMalformed, "line %d: %q names no file", i+1, l)
	}
	return name, when, nil
}

// stripPair strips the prefixes of a diff's two names: a/ and b/, or the
// two folders `diff -ru old new` compared (different first folders, the
// same rest). Names that are neither stay as they are.
func stripPair(a, b string) (string, string) {
	if strings.HasPrefix(a, "a/") && strings.HasPrefix(b, "b/") {
		return a[2:], b[2:]
	}
	ai, bi := strings.IndexByte(a, '/'), strings.IndexByte(b, '/')
	if ai > 0 && bi > 0 && a[:ai] != b[:bi] && a[ai+1:] == b[bi+1:] {
		return a[ai+1:], b[bi+1:]
	}
	return a, b
}

// stripOne strips the a/ or b/ of a name whose other side is /dev/null.
func stripOne(n string) string {
	if strings.HasPrefix(n, "a/") || strings.HasPrefix(n, "b/") {
		return n[2:]
	}
	return n
}

// hunks reads f's hunks, which start at line p.i.
func (p *parser) hunks(f *filePatch) error {
	for p.i < len(p.lines) && strings.HasPrefix(p.lines[p.i], "@@ ") {
		h, err := p.hunk(f, len(f.hunks)+1)
		if err != nil {
			return err
		}
		f.hunks = append(f.hunks, h)
	}
	return nil
}

func (p *parser) hunk(f *filePatch, n int) (hunk, error) {
	l := p.header(p.i)
	m := hunkHeader.FindStringSubmatch(l)
	if m == nil {
		return hunk{}, refuse(reason.PatchMalformed, "line %d: %q is not a hunk header (@@ -l,s +l,s @@)", p.i+1, l)
	}
	num := func(s string) int {
		if s == "" {
			return 1
		}
		v, err := strconv.Atoi(s)
		if err != nil || v > 1<<30 {
			return -1
		}
		return v
	}
	h := hunk{oldStart: num(m[1]), oldLines: num(m[2]), newStart: num(m[3]), newLines: num(m[4]), header: m[0], n: n}
	if h.oldStart < 0 || h.oldLines < 0 || h.newStart < 0 || h.newLines < 0 {
		return hunk{}, refuse(reason.PatchMalformed, "line %d: %q names a line number the arena cannot read", p.i+1, l)
	}
	at := p.i + 1
	p.i++
	oldLeft, newLeft := h.oldLines, h.newLines
	for oldLeft > 0 || newLeft > 0 {
		if p.i >= len(p.lines) {
			return hunk{}, refuse(reason.PatchMalformed, "hunk %d of %s (%s, line %d) ends before its %d old and %d new lines", n, f.name(), h.header, at, h.oldLines, h.newLines)
		}
		l := p.lines[p.i]
		op := byte(' ')
		text := ""
		switch {
		case l == "\n" || l == "\r\n":
			// An empty context line whose space an editor dropped.
			text = l
		case l[0] == ' ' || l[0] == '-' || l[0] == '+':
			op, text = l[0], l[1:]
		case l[0] == '\\':
			if err := noNewline(&h, p.i); err != nil {
				return hunk{}, err
			}
			p.i++
			continue
		default:
			return hunk{}, refuse(reason.PatchMalformed, "hunk %d of %s (%s, line %d) ends at line %d, before its %d old and %d new lines: %q is no hunk line",
				n, f.name(), h.header, at, p.i+1, h.oldLines, h.newLines, strings.TrimRight(l, "\r\n"))
		}
		switch op {
		case ' ':
			oldLeft--
			newLeft--
		case '-':
			oldLeft--
		case '+':
			newLeft--
		}
		if oldLeft < 0 || newLeft < 0 {
			return hunk{}, refuse(reason.PatchMalformed, "hunk %d of %s (%s, line %d) holds more lines than its header counts (line %d)", n, f.name(), h.header, at, p.i+1)
		}
		if !strings.HasSuffix(text, "\n") {
			// The patch's last line has no line end: as written.
			text += "\n"
		}
		h.lines = append(h.lines, hunkLine{op: op, text: text})
		p.i++
	}
	if p.i < len(p.lines) && strings.HasPrefix(p.lines[p.i], "\\") {
		if err := noNewline(&h, p.i); err != nil {
			return hunk{}, err
		}
		p.i++
	}
	return h, nil
}

// noNewline takes "\ No newline at end of file": the line before it has
// no line end.
func noNewline(h *hunk, i int) error {
	if len(h.lines) == 0 {
		return refuse(reason.PatchMalformed, "line %d: \"\\ No newline at end of file\" follows no line", i+1)
	}
	last := &h.lines[len(h.lines)-1]
	last.text = strings.TrimSuffix(last.text, "\n")
	return nil
}
