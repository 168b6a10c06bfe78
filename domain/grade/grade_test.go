package grade_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// overLong is an answer one byte over the limit; its content would be
// right, to show it is refused unread.
var overLong = strings.Repeat(" ", grade.MaxAnswerBytes-5) + "Paris 42 B"

// gradeCase is one answer to one item and what grading it must give.
type gradeCase struct {
	name   string
	item   suite.Item
	answer string
	want   grade.Result
	// detail, when set, must be in the Detail (which is then not compared
	// whole).
	detail string
}

func runCases(t *testing.T, cases []gradeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := grade.Grade(context.Background(), tc.item, tc.answer)
			require.NoError(t, err)
			if tc.detail != "" {
				require.Contains(t, got.Detail, tc.detail)
				got.Detail = ""
			}
			require.Equal(t, tc.want, got)
			require.GreaterOrEqual(t, got.Score, 0.0)
			require.LessOrEqual(t, got.Score, 1.0)
		})
	}
}

var (
	right = grade.Result{Score: 1}
	wrong = grade.Result{Score: 0}
	empty = grade.Result{Empty: true, Detail: "empty answer"}
	over  = grade.Result{Empty: true, Detail: "answer over 65536 bytes"}
)

func TestExact(t *testing.T) {
	t.Parallel()
	paris := suite.Item{ID: "e1", Grader: suite.GraderExact, Answer: "Paris"}
	csharp := suite.Item{ID: "e2", Grader: suite.GraderExact, Answer: "C#"}
	newYork := suite.Item{ID: "e3", Grader: suite.GraderExact, Answer: "New York"}
	runCases(t, []gradeCase{
		{name: "right", item: paris, answer: "Paris", want: right},
		{name: "case and space", item: paris, answer: "  pARIS \n", want: right},
		{name: "punctuation", item: paris, answer: `"Paris."`, want: right},
		{name: "answer prefix", item: paris, answer: "Answer: Paris", want: right},
		{name: "markdown answer prefix", item: paris, answer: "**Answer:** *Paris*!", want: right},
		{name: "inner space collapsed", item: newYork, answer: "new   york", want: right},
		{name: "kept punctuation", item: csharp, answer: "c#.", want: right},
		{name: "lost punctuation", item: csharp, answer: "C", want: wrong, detail: `got "C", want "C#"`},
		{name: "wrong", item: paris, answer: "London", want: wrong, detail: `got "London", want "Paris"`},
		{name: "extra words", item: paris, answer: "It is Paris", want: wrong, detail: "got"},
		{name: "only punctuation", item: paris, answer: "?!", want: wrong, detail: `got ""`},
		{name: "invalid utf-8", item: paris, answer: "Par\xffis", want: wrong, detail: "got"},
		{name: "empty", item: paris, answer: "", want: empty},
		{name: "blank", item: paris, answer: " \n\t", want: empty},
		{name: "over long", item: paris, answer: overLong, want: over},
	})
}

func TestNumeric(t *testing.T) {
	t.Parallel()
	n42 := suite.Item{ID: "n1", Grader: suite.GraderNumeric, Answer: "42"}
	big := suite.Item{ID: "n2", Grader: suite.GraderNumeric, Answer: "1234567"}
	neg := suite.Item{ID: "n3", Grader: suite.GraderNumeric, Answer: "-3.5"}
	loose := suite.Item{ID: "n4", Grader: suite.GraderNumeric, Answer: "3.14159", Tolerance: 0.01}
	five := suite.Item{ID: "n5", Grader: suite.GraderNumeric, Answer: "5"}
	runCases(t, []gradeCase{
		{name: "right", item: n42, answer: "42", want: right},
		{name: "last number", item: n42, answer: "6 times 7 is 42.", want: right},
		{name: "not the last number", item: n42, answer: "42, or maybe 41", want: wrong, detail: "got 41, want 42"},
		{name: "decimal zero", item: n42, answer: "The answer is 42.0", want: right},
		{name: "scientific", item: n42, answer: "4.2e1", want: right},
		{name: "thousands", item: big, answer: "It costs $1,234,567.", want: right},
		{name: "thousands as plain digits", item: big, answer: "1234567", want: right},
		{name: "negative", item: neg, answer: "x = -3.5", want: right},
		{name: "unicode minus", item: neg, answer: "x = −3.5", want: right},
		{name: "hyphen is not a sign", item: five, answer: "pages 3-5", want: right},
		{name: "date ends in its day", item: five, answer: "on 2024-01-05", want: right},
		{name: "leading dot", item: suite.Item{ID: "n6", Grader: suite.GraderNumeric, Answer: "0.5"}, answer: "half is .5", want: right},
		{name: "comma group of four is not thousands", item: suite.Item{ID: "n7", Grader: suite.GraderNumeric, Answer: "2345"}, answer: "1,2345", want: right},
		{name: "list", item: five, answer: "1,2,5", want: right},
		{name: "within tolerance", item: loose, answer: "about 3.14", want: right},
		{name: "outside tolerance", item: loose, answer: "about 3.1", want: wrong, detail: "tolerance 0.01"},
		{name: "default tolerance", item: n42, answer: "42.0000001", want: right},
		{name: "outside default tolerance", item: n42, answer: "42.001", want: wrong, detail: "want 42"},
		{name: "no number", item: n42, answer: "forty-two", want: grade.Result{Detail: "no number in answer"}},
		{name: "out of range", item: n42, answer: "1e999", want: wrong, detail: "out of range"},
		{name: "empty", item: n42, answer: "", want: empty},
		{name: "over long", item: n42, answer: overLong, want: over},
	})
}

func TestChoice(t *testing.T) {
	t.Parallel()
	b := suite.Item{ID: "c1", Grader: suite.GraderChoice, Answer: "B", Choices: []string{"x", "y", "z", "w"}}
	fmtRight := grade.Result{Score: 1, Formatted: true, HasFormat: true}
	unfmtRight := grade.Result{Score: 1, HasFormat: true}
	noLine := `no final "Answer: X" line`
	runCases(t, []gradeCase{
		{name: "formatted", item: b, answer: "Because y.\nAnswer: B", want: fmtRight},
		{name: "formatted lower keyword", item: b, answer: "answer:B\n\n", want: fmtRight},
		{name: "formatted spaces", item: b, answer: "reasoning\n  ANSWER :  B  ", want: fmtRight},
		{name: "formatted wrong", item: b, answer: "Answer: C", want: grade.Result{Formatted: true, HasFormat: true}, detail: "got C (answer line), want B"},
		{name: "answer line not last", item: b, answer: "Answer: B\nI am confident.", want: unfmtRight, detail: noLine},
		{name: "answer is", item: b, answer: "The answer is: (B) y", want: unfmtRight, detail: noLine},
		{name: "bold answer line", item: b, answer: "**Answer: B**", want: unfmtRight, detail: noLine},
		{name: "last answer line wins", item: b, answer: "Answer: A\nNo wait.\nAnswer: B", want: fmtRight},
		{name: "lone letter", item: b, answer: "B", want: unfmtRight, detail: noLine},
		{name: "lone lower letter", item: b, answer: "(b)", want: unfmtRight, detail: noLine},
		{name: "last standalone letter", item: b, answer: "A is tempting but B fits best", want: unfmtRight, detail: noLine},
		{name: "answer line needs a lone letter", item: b, answer: "Answer: Bob says C", want: grade.Result{HasFormat: true}, detail: "got C (last standalone letter)"},
		{name: "letters inside words ignored", item: b, answer: "Bob thinks C", want: grade.Result{HasFormat: true}, detail: "got C (last standalone letter)"},
		{name: "invalid letter ignored", item: b, answer: "Answer: E", want: grade.Result{HasFormat: true}, detail: "no choice letter"},
		{name: "invalid letter is not formatted", item: b, answer: "Answer: F\nAnswer: B\nAnswer: E", want: unfmtRight, detail: noLine},
		{name: "no letter", item: b, answer: "i do not know", want: grade.Result{HasFormat: true}, detail: "no choice letter in answer"},
		{name: "empty", item: b, answer: "", want: grade.Result{HasFormat: true, Empty: true, Detail: "empty answer"}},
		{name: "over long", item: b, answer: overLong, want: grade.Result{HasFormat: true, Empty: true, Detail: "answer over 65536 bytes"}},
	})
}

func TestRegex(t *testing.T) {
	t.Parallel()
	date := suite.Item{ID: "r1", Grader: suite.GraderRegex, Pattern: `^\d{4}-\d{2}-\d{2}$`}
	word := suite.Item{ID: "r2", Grader: suite.GraderRegex, Pattern: `(?i)\bparis\b`}
	runCases(t, []gradeCase{
		{name: "right", item: date, answer: "2024-01-31", want: right},
		{name: "trimmed", item: date, answer: "  2024-01-31\n", want: right},
		{name: "wrong", item: date, answer: "31/01/2024", want: wrong, detail: "does not match"},
		{name: "anchored", item: date, answer: "on 2024-01-31", want: wrong, detail: "does not match"},
		{name: "unanchored", item: word, answer: "It is PARIS, of course.", want: right},
		{name: "empty", item: date, answer: "", want: empty},
		{name: "over long", item: word, answer: overLong, want: over},
	})
}

func TestBadItems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		item suite.Item
		want error
	}{
		{"unknown grader", suite.Item{ID: "u", Grader: "judge"}, grade.ErrUnknownGrader},
		{"no grader", suite.Item{ID: "u"}, grade.ErrUnknownGrader},
		{"exact without answer", suite.Item{ID: "e", Grader: suite.GraderExact}, grade.ErrBadItem},
		{"numeric answer not a number", suite.Item{ID: "n", Grader: suite.GraderNumeric, Answer: "forty"}, grade.ErrBadItem},
		{"choice without choices", suite.Item{ID: "c", Grader: suite.GraderChoice, Answer: "A"}, grade.ErrBadItem},
		{"choice answer out of range", suite.Item{ID: "c", Grader: suite.GraderChoice, Answer: "C", Choices: []string{"x", "y"}}, grade.ErrBadItem},
		{"regex without pattern", suite.Item{ID: "r", Grader: suite.GraderRegex}, grade.ErrBadItem},
		{"regex that does not compile", suite.Item{ID: "r", Grader: suite.GraderRegex, Pattern: `(unclosed`}, grade.ErrBadItem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := grade.Grade(context.Background(), tc.item, "A")
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.item.ID)
		})
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := grade.NewRegistry()
	require.Equal(t, []string{"choice", "exact", "numeric", "regex"}, r.Names())
	// The code grader is an adapter (adapters/sandbox), not part of the
	// pure package: without it a code item has no grader.
	_, err := grade.For(suite.Item{ID: "k", Grader: suite.GraderCode})
	require.ErrorIs(t, err, grade.ErrUnknownGrader)
	for _, name := range r.Names() {
		g, err := grade.For(suite.Item{ID: "x", Grader: name})
		require.NoError(t, err)
		require.NotNil(t, g)
	}

	// Another implementation, such as an LLM judge, is one Register away.
	judge := grade.GraderFunc(func(_ context.Context, it suite.Item, answer string) (grade.Result, error) {
		return grade.Result{Score: 0.5, Detail: "judged " + it.ID + ": " + answer}, nil
	})
	r.Register("judge", judge)
	res, err := r.Grade(context.Background(), suite.Item{ID: "j1", Grader: "judge"}, "essay")
	require.NoError(t, err)
	require.Equal(t, grade.Result{Score: 0.5, Detail: "judged j1: essay"}, res)

	// The package-level registry is not affected.
	_, err = grade.For(suite.Item{ID: "j1", Grader: "judge"})
	require.ErrorIs(t, err, grade.ErrUnknownGrader)

	// A Registry is itself a Grader.
	var _ grade.Grader = r
	require.Panics(t, func() { r.Register("", judge) })
	require.Panics(t, func() { r.Register("nil", nil) })
}

func TestTestItemsAreValid(t *testing.T) {
	t.Parallel()
	// The items of these tests are valid suite items, so the graders are
	// tested on what suites hold.
	for _, it := range []suite.Item{
		{ID: "e1", Prompt: "p", Grader: suite.GraderExact, Answer: "Paris"},
		{ID: "n1", Prompt: "p", Grader: suite.GraderNumeric, Answer: "42"},
		{ID: "c1", Prompt: "p", Grader: suite.GraderChoice, Answer: "B", Choices: []string{"x", "y", "z", "w"}},
		{ID: "r1", Prompt: "p", Grader: suite.GraderRegex, Pattern: `^\d{4}-\d{2}-\d{2}$`},
	} {
		require.NoError(t, it.Validate())
	}
}
