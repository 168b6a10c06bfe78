// Package grade scores a model's answer to one eval item.
//
// A Grader turns (item, answer) into a Result. The built-in graders are
// named after the suite's grader names (suite.GraderExact, ...); a
// Registry maps those names to graders, so another implementation, such as
// a shared LLM judge reached over HTTP, is added by registering it under
// its own name:
//
//	r := grade.NewRegistry()          // exact, numeric, choice, regex, code
//	r.Register("judge", judgeClient)  // any Grader
//	res, err := r.Grade(ctx, item, answer)
//
// Invariants every Grader keeps:
//
//   - A wrong, empty, over-long or malformed answer is a Result, never an
//     error: it scores 0 and says why in Detail. An error means the grader
//     itself failed (a sandbox that could not start, an item it cannot
//     grade, a cancelled context), so the caller retries or reports it
//     rather than recording a 0.
//   - Score is in [0, 1]; the built-in graders give exactly 0 or 1.
//   - An answer longer than MaxAnswerBytes is refused unread (Empty, with
//     Detail "answer over 65536 bytes").
//   - Graders are safe for concurrent use.
package grade

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/lowbarena/lowbarena/domain/suite"
)

// MaxAnswerBytes is the longest answer graded; a longer one scores 0 with
// Empty set, unread.
const MaxAnswerBytes = 64 << 10

// Errors that graders wrap, for errors.Is.
var (
	// ErrUnknownGrader is returned for an item whose grader name has no
	// registered Grader.
	ErrUnknownGrader = errors.New("unknown grader")
	// ErrBadItem is returned for an item the grader cannot grade: a
	// reference answer that is not a number, a pattern that does not
	// compile, a choice item without choices.
	ErrBadItem = errors.New("item cannot be graded")
)

// Result is the grade of one answer.
type Result struct {
	// Score is in [0, 1]: 1 right, 0 wrong.
	Score float64 `json:"score"`
	// Formatted reports that the answer kept the grader's format contract;
	// it is meaningful only when HasFormat is set, and false otherwise.
	Formatted bool `json:"formatted"`
	// HasFormat reports that the grader has a format contract (only the
	// choice grader among the built-in ones).
	HasFormat bool `json:"has_format"`
	// Empty reports that there was no gradeable answer: a blank answer, one
	// over MaxAnswerBytes, or (code) no program.
	Empty bool `json:"empty"`
	// Detail says why, for people; it is not meant to be parsed.
	Detail string `json:"detail,omitempty"`
}

// Grader scores an answer to an item. Implementations must be safe for
// concurrent use and keep the invariants of the package doc: a bad answer
// is a Result, an error is the grader's own failure.
type Grader interface {
	// Grade scores answer as a reply to it.
	Grade(ctx context.Context, it suite.Item, answer string) (Result, error)
}

// GraderFunc adapts a function to the Grader interface.
type GraderFunc func(ctx context.Context, it suite.Item, answer string) (Result, error)

// Grade calls f.
func (f GraderFunc) Grade(ctx context.Context, it suite.Item, answer string) (Result, error) {
	return f(ctx, it, answer)
}

// Registry maps grader names to Graders. It is itself a Grader that
// dispatches on the item's Grader name. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	graders map[string]Grader
}

// NewRegistry returns a Registry holding the pure graders under the
// suite's names: exact, numeric, choice and regex. The code grader runs
// programs in a sandbox, an adapter (adapters/sandbox), which registers
// itself under suite.GraderCode in the package-level registry when
// imported.
func NewRegistry() *Registry {
	r := &Registry{graders: map[string]Grader{}}
	r.Register(suite.GraderExact, Exact{})
	r.Register(suite.GraderNumeric, Numeric{})
	r.Register(suite.GraderChoice, Choice{})
	r.Register(suite.GraderRegex, Regex{})
	return r
}

// Register makes g the grader for name, replacing any before it. It
// panics on an empty name or a nil grader, which are programming errors.
func (r *Registry) Register(name string, g Grader) {
	if name == "" {
		panic("grade: Register with an empty name")
	}
	if g == nil {
		panic("grade: Register " + name + " with a nil grader")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.graders[name] = g
}

// Names returns the registered grader names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.graders))
	for n := range r.graders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// For returns the grader for the item's Grader name, or an error wrapping
// ErrUnknownGrader.
func (r *Registry) For(it suite.Item) (Grader, error) {
	r.mu.RLock()
	g, ok := r.graders[it.Grader]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("grade: item %s: %w %q (have %s)", it.ID, ErrUnknownGrader, it.Grader, strings.Join(r.Names(), ", "))
	}
	return g, nil
}

// Grade scores answer with the grader the item names.
func (r *Registry) Grade(ctx context.Context, it suite.Item, answer string) (Result, error) {
	g, err := r.For(it)
	if err != nil {
		return Result{}, err
	}
	return g.Grade(ctx, it, answer)
}

// std is the registry behind the package-level For, Grade and Check: the
// pure graders, and those that adapters add with Register from their init
// functions. It is never mutated after init.
var std = NewRegistry()

// Register adds g to the package-level registry under name. It is for an
// adapter's init function (adapters/sandbox registers the code grader):
// the registry is read without further registration once main starts.
func Register(name string, g Grader) { std.Register(name, g) }

// For returns the built-in grader for the item's Grader name, or an error
// wrapping ErrUnknownGrader.
func For(it suite.Item) (Grader, error) { return std.For(it) }

// Grade scores answer with the built-in grader the item names.
func Grade(ctx context.Context, it suite.Item, answer string) (Result, error) {
	return std.Grade(ctx, it, answer)
}

// Refuse returns the Result for an answer that cannot be graded at all
// (blank or over MaxAnswerBytes), and whether it applies. Every grader,
// the sandbox's included, refuses such an answer the same way.
func Refuse(answer string, hasFormat bool) (Result, bool) {
	switch {
	case len(answer) > MaxAnswerBytes:
		return Result{HasFormat: hasFormat, Empty: true, Detail: fmt.Sprintf("answer over %d bytes", MaxAnswerBytes)}, true
	case strings.TrimSpace(answer) == "":
		return Result{HasFormat: hasFormat, Empty: true, Detail: "empty answer"}, true
	}
	return Result{}, false
}

// score is 1 for true and 0 for false.
func score(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

// quote shortens s for a Detail.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		// Cut on a rune boundary.
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// Exact grades an answer that must equal the item's Answer: compared
// trimmed and case-insensitively (Unicode simple folding), with runs of
// white space counted as one space, ignoring a leading "Answer:" and the
// punctuation around the answer ("**Paris.**" matches "Paris"). Punctuation
// that the reference itself has at an end must be kept there ("C" does not
// match "C#", "C#." does). It has no format contract.
type Exact struct{}

// answerPrefix is a leading "Answer:" (any case, spaces before the colon).
var answerPrefix = regexp.MustCompile(`^(?i:answer)\s*:`)

// Grade scores answer against it.Answer.
func (Exact) Grade(_ context.Context, it suite.Item, answer string) (Result, error) {
	want := strings.TrimSpace(it.Answer)
	if want == "" {
		return Result{}, fmt.Errorf("exact grader: item %s: %w: no reference answer", it.ID, ErrBadItem)
	}
	if r, ok := Refuse(answer, false); ok {
		return r, nil
	}
	got := strings.TrimSpace(answer)
	// Drop a leading "Answer:", possibly behind markup ("**Answer:**").
	for range 3 {
		t := strings.TrimLeftFunc(got, isPunctOrSpace)
		loc := answerPrefix.FindStringIndex(t)
		if loc == nil {
			break
		}
		got = t[loc[1]:]
	}
	gl, gc, gt := splitPunct(got)
	wl, wc, wt := splitPunct(want)
	ok := strings.EqualFold(collapseSpace(gc), collapseSpace(wc)) &&
		strings.HasSuffix(dropSpace(gl), dropSpace(wl)) &&
		strings.HasPrefix(dropSpace(gt), dropSpace(wt))
	res := Result{Score: score(ok)}
	if !ok {
		res.Detail = fmt.Sprintf("got %s, want %s", quote(collapseSpace(gc)), quote(want))
	}
	return res, nil
}

func isPunctOrSpace(r rune) bool { return unicode.IsPunct(r) || unicode.IsSpace(r) || r == '`' }

// splitPunct splits s into its leading punctuation and space, its core, and
// its trailing punctuation and space; lead+core+trail == s.
func splitPunct(s string) (lead, core, trail string) {
	core = strings.TrimLeftFunc(s, isPunctOrSpace)
	lead = s[:len(s)-len(core)]
	c := strings.TrimRightFunc(core, isPunctOrSpace)
	return lead, c, core[len(c):]
}

func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

func dropSpace(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}

// DefaultTolerance is the numeric grader's absolute tolerance when the
// item sets none.
const DefaultTolerance = 1e-6

// Numeric grades the last number in the answer against the item's Answer,
// within the item's Tolerance (absolute; DefaultTolerance when zero or
// less). Numbers may be negative (ASCII "-" or U+2212), decimal, in
// scientific notation, or grouped with thousands separators ("1,234.5"); a
// "-" right after a letter or digit is a hyphen, not a sign ("pages 3-5"
// ends in 5). It has no format contract.
type Numeric struct{}

// Grade scores answer against it.Answer.
func (Numeric) Grade(_ context.Context, it suite.Item, answer string) (Result, error) {
	want, err := parseNumber(strings.TrimSpace(it.Answer))
	if err != nil {
		return Result{}, fmt.Errorf("numeric grader: item %s: %w: reference answer %q is not a number: %w", it.ID, ErrBadItem, it.Answer, err)
	}
	if r, ok := Refuse(answer, false); ok {
		return r, nil
	}
	text, ok := lastNumber(answer)
	if !ok {
		return Result{Detail: "no number in answer"}, nil
	}
	got, err := parseNumber(text)
	if err != nil {
		return Result{Detail: fmt.Sprintf("number %s out of range", quote(text))}, nil
	}
	tol := it.Tolerance
	if !(tol > 0) { // also catches NaN
		tol = DefaultTolerance
	}
	if math.Abs(got-want) <= tol {
		return Result{Score: 1}, nil
	}
	return Result{Detail: fmt.Sprintf("got %s, want %s (tolerance %g)", text, it.Answer, tol)}, nil
}

// lastNumber returns the text of the last number in s: in the syntax of
// the regexp
//
//	[-−]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][-+]?\d+)?|[-−]?\.\d+([eE][-+]?\d+)?
//
// scanned by hand (ten times faster), except that a group after a comma
// must be exactly three digits ("1,2345" is 1 and 2345), and with the sign
// dropped when it is a hyphen: right after a letter or digit.
func lastNumber(s string) (string, bool) {
	last, found := "", false
	for i := 0; i < len(s); {
		if !isDigit(s[i]) && !(s[i] == '.' && i+1 < len(s) && isDigit(s[i+1])) {
			i++
			continue
		}
		start, end := i, scanNumber(s, i)
		switch {
		case i >= 1 && s[i-1] == '-':
			start = i - 1
		case i >= len("−") && s[i-len("−"):i] == "−":
			start = i - len("−")
		}
		if start > 0 {
			if prev, _ := utf8.DecodeLastRuneInString(s[:start]); isWord(prev) {
				start = i
			}
		}
		last, found = s[start:end], true
		i = end
	}
	return last, found
}

// scanNumber returns the end of the unsigned number starting at s[i], a
// digit or a '.' before a digit.
func scanNumber(s string, i int) int {
	j := i
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if n := j - i; n >= 1 && n <= 3 {
		// Thousands groups: ",ddd" not followed by a digit.
		for j+3 < len(s) && s[j] == ',' && isDigit(s[j+1]) && isDigit(s[j+2]) && isDigit(s[j+3]) &&
			(j+4 == len(s) || !isDigit(s[j+4])) {
			j += 4
		}
	}
	if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
		j += 2
		for j < len(s) && isDigit(s[j]) {
			j++
		}
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && isDigit(s[k]) {
			for k < len(s) && isDigit(s[k]) {
				k++
			}
			j = k
		}
	}
	return j
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// parseNumber parses a number as the number pattern writes it.
func parseNumber(s string) (float64, error) {
	s = strings.ReplaceAll(s, ",", "")
	s = strings.Replace(s, "−", "-", 1)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %q: %w", s, err)
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("parse %q: not finite", s)
	}
	return f, nil
}

// Choice grades a multiple-choice answer: the item's Choices are lettered
// A, B, ... and its Answer is the right letter.
//
// The format contract, which prompts must state, is that the answer ends
// with a final line
//
//	Answer: X
//
// where X is the capital letter of one of the choices; "answer:" may be in
// any case, with optional spaces around the colon and around the line, and
// trailing blank lines are allowed. Result.Formatted reports whether the
// answer kept it.
//
// The score does not depend on the format: the letter is taken leniently,
// in order, from the last "Answer: X" (or "answer is: X") anywhere in the
// answer, else from an answer that is a lone letter ("b", "(B)", "B."),
// else from the last standalone capital letter among the valid letters.
// Score is 1 when that letter is the item's Answer.
type Choice struct{}

// Grade scores answer against it.Answer.
func (Choice) Grade(_ context.Context, it suite.Item, answer string) (Result, error) {
	n := len(it.Choices)
	if n < 2 || n > 26 {
		return Result{}, fmt.Errorf("choice grader: item %s: %w: %d choices (want 2 to 26)", it.ID, ErrBadItem, n)
	}
	want := strings.TrimSpace(it.Answer)
	if len(want) != 1 || !validLetter(want[0], n) {
		return Result{}, fmt.Errorf("choice grader: item %s: %w: answer %q is not the letter of one of its %d choices", it.ID, ErrBadItem, it.Answer, n)
	}
	if r, ok := Refuse(answer, true); ok {
		return r, nil
	}
	res := Result{HasFormat: true}
	trimmed := strings.TrimRightFunc(answer, unicode.IsSpace)
	last := strings.TrimSpace(trimmed[strings.LastIndexByte(trimmed, '\n')+1:])
	if c, rest, ok := answerLetter(last, false); ok && rest == "" && validLetter(c, n) {
		res.Formatted = true
	}
	got, how := extractChoice(trimmed, n)
	if got == 0 {
		res.Detail = "no choice letter in answer"
		return res, nil
	}
	res.Score = score(got == want[0])
	if res.Score == 0 {
		res.Detail = fmt.Sprintf("got %c (%s), want %s", got, how, want)
	}
	if !res.Formatted {
		if res.Detail != "" {
			res.Detail += "; "
		}
		res.Detail += `no final "Answer: X" line`
	}
	return res, nil
}

// answerLetter parses s as "answer", spaces or tabs, ":", spaces or tabs,
// and a capital letter, returning the letter and what follows it. Lenient
// also allows "is" before the colon ("answer is: X") and markup between
// the colon and the letter ("Answer: **X**", "Answer: (X)").
func answerLetter(s string, lenient bool) (letter byte, rest string, ok bool) {
	if len(s) < len("answer") || !strings.EqualFold(s[:len("answer")], "answer") {
		return 0, "", false
	}
	s = trimBlank(s[len("answer"):])
	if lenient && len(s) >= 2 && strings.EqualFold(s[:2], "is") {
		s = trimBlank(s[2:])
	}
	if s == "" || s[0] != ':' {
		return 0, "", false
	}
	s = trimBlank(s[1:])
	if lenient {
		s = trimBlank(strings.TrimLeft(s, "*_([{"))
	}
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return 0, "", false
	}
	return s[0], s[1:], true
}

// trimBlank drops leading spaces and tabs.
func trimBlank(s string) string { return strings.TrimLeft(s, " \t") }

// lastIndexFold is strings.LastIndex for an ASCII lower-case sub,
// ignoring ASCII case in s.
func lastIndexFold(s, sub string) int {
	for i := len(s) - len(sub); i >= 0; i-- {
		if s[i]|0x20 == sub[0] && strings.EqualFold(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// validLetter reports whether c is the capital letter of one of n choices.
func validLetter(c byte, n int) bool { return c >= 'A' && int(c-'A') < n }

// extractChoice returns the chosen letter (0 when none) and how it was
// found; see Choice.
func extractChoice(s string, n int) (byte, string) {
	// The last "Answer: X" with a valid X: each "answer" from the end.
	for end := len(s); end > 0; {
		i := lastIndexFold(s[:end], "answer")
		if i < 0 {
			break
		}
		if c, rest, ok := answerLetter(s[i:], true); ok && validLetter(c, n) {
			if next, _ := utf8.DecodeRuneInString(rest); rest == "" || !isWord(next) {
				return c, "answer line"
			}
		}
		end = i
	}
	if core := strings.TrimFunc(s, isPunctOrSpace); len(core) == 1 {
		c := core[0]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if validLetter(c, n) {
			return c, "lone letter"
		}
	}
	// The last capital letter among the valid ones with neither a letter
	// nor a digit on either side.
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if !validLetter(c, n) {
			continue
		}
		prev, _ := utf8.DecodeLastRuneInString(s[:i])
		next, _ := utf8.DecodeRuneInString(s[i+1:])
		if (i == 0 || !isWord(prev)) && (i+1 == len(s) || !isWord(next)) {
			return c, "last standalone letter"
		}
	}
	return 0, ""
}

func isWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// Regex grades an answer that must match the item's Pattern (Go regexp
// syntax, RE2), applied to the trimmed answer; the pattern is not anchored
// unless it says so (^...$). A pattern that does not compile is an error
// wrapping ErrBadItem. It has no format contract.
type Regex struct{}

// Grade scores answer against it.Pattern.
func (Regex) Grade(_ context.Context, it suite.Item, answer string) (Result, error) {
	if it.Pattern == "" {
		return Result{}, fmt.Errorf("regex grader: item %s: %w: no pattern", it.ID, ErrBadItem)
	}
	re, err := regexp.Compile(it.Pattern)
	if err != nil {
		return Result{}, fmt.Errorf("regex grader: item %s: %w: %w", it.ID, ErrBadItem, err)
	}
	if r, ok := Refuse(answer, false); ok {
		return r, nil
	}
	got := strings.TrimSpace(answer)
	if re.MatchString(got) {
		return Result{Score: 1}, nil
	}
	return Result{Detail: fmt.Sprintf("%s does not match %s", quote(got), quote(it.Pattern))}, nil
}

// Check reports whether the registered graders can grade every item of s
// on this machine: nil, or the code grader's refusal (adapters/sandbox:
// an error wrapping its ErrSandboxUnavailable) when s has code items and their sandbox cannot
// run here. Callers check before they spend anything on answers, such as
// starting an engine.
func Check(ctx context.Context, s *suite.Suite) error {
	for _, items := range s.Items {
		for _, it := range items {
			if it.Grader != suite.GraderCode {
				continue
			}
			g, err := std.For(it)
			if err != nil {
				return err
			}
			if c, ok := g.(interface{ Check(context.Context) error }); ok {
				return c.Check(ctx)
			}
			return nil
		}
	}
	return nil
}
