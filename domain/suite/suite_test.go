package suite_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/suite"
)

func TestGenerateIsDeterministicAndLoads(t *testing.T) {
	a := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.DevSizes)
	b := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.DevSizes)
	require.Equal(t, a, b)
	dir := t.TempDir()
	require.NoError(t, suite.Write(dir, a))
	got, err := suite.Load(dir)
	require.NoError(t, err)
	require.Equal(t, a.Meta, got.Meta)
	require.Equal(t, a.Items, got.Items)
	require.Equal(t, 310, got.Count())
	require.Equal(t, "lowb-gen@1/dev", got.Key())
	for d, n := range suite.DevSizes {
		require.Len(t, got.Items[d], n, d)
	}
}

// The ranked split comes from another seed: none of its prompts is a dev
// prompt.
func TestRankedSharesNothingWithDev(t *testing.T) {
	dev := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.DevSizes)
	ranked := suite.Generate("lowb-gen", "1", suite.SplitRanked, suite.SeedRanked, suite.DevSizes)
	seen := map[string]bool{}
	for _, its := range dev.Items {
		for _, it := range its {
			seen[it.Prompt] = true
		}
	}
	shared := 0
	for _, its := range ranked.Items {
		for _, it := range its {
			if seen[it.Prompt] {
				shared++
			}
		}
	}
	require.Zero(t, shared)
}

// Every generated item is solvable by the generator's own solver, and the
// solution agrees with the recorded answer.
func TestSolveAnswersEveryItem(t *testing.T) {
	s := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.DevSizes)
	for d, its := range s.Items {
		for _, it := range its {
			sol, ok := suite.Solve(it.Prompt)
			require.True(t, ok, "%s: %s", d, it.ID)
			require.NotEmpty(t, sol.Wrong, it.ID)
			require.Equal(t, d, sol.Domain, it.ID)
			switch it.Grader {
			case suite.GraderNumeric:
				require.Equal(t, it.Answer, sol.Right, it.ID)
			case suite.GraderChoice:
				require.True(t, strings.HasSuffix(sol.Right, "Answer: "+it.Answer), "%s: %q", it.ID, sol.Right)
				require.Equal(t, it.Answer, sol.Unformatted)
			case suite.GraderCode:
				require.Contains(t, sol.Right, "```python")
			}
		}
	}
	_, ok := suite.Solve("What is the meaning of life?")
	require.False(t, ok)
}

func TestLoadRefuses(t *testing.T) {
	good := `{"id":"m1","domain":"math","prompt":"1+1?","answer":"2","grader":"numeric"}`
	cases := []struct {
		name, math, want string
	}{
		{"missing answer", `{"id":"m1","domain":"math","prompt":"1+1?","grader":"numeric"}`, "needs an answer"},
		{"duplicate id", good + "\n" + good, "duplicate id m1"},
		{"wrong domain", `{"id":"m1","domain":"code","prompt":"1+1?","answer":"2","grader":"numeric"}`, `says domain "code"`},
		{"unknown grader", `{"id":"m1","domain":"math","prompt":"1+1?","answer":"2","grader":"vibes"}`, "unknown grader"},
		{"unknown field", `{"id":"m1","domain":"math","prompt":"1+1?","answer":"2","grader":"numeric","secret":1}`, "unknown field"},
		{"bad choice answer", `{"id":"m1","domain":"math","prompt":"?","answer":"E","grader":"choice","choices":["a","b"]}`, "not the letter"},
		{"no prompt", `{"id":"m1","domain":"math","answer":"2","grader":"numeric"}`, "exactly one of prompt and messages"},
		{"empty file", ``, "holds no items"},
		{"not json", `{"id":`, "line 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, suite.File), []byte(`{"name":"s","version":"1","split":"dev","seed":1,"domains":["math"]}`), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "math.jsonl"), []byte(tc.math), 0o644))
			_, err := suite.Load(dir)
			require.ErrorIs(t, err, suite.ErrBadSuite)
			require.ErrorContains(t, err, tc.want)
		})
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, suite.File), []byte(`{"name":"s","version":"1","split":"test","domains":["math"]}`), 0o644))
	_, err := suite.Load(dir)
	require.ErrorContains(t, err, "split dev or ranked")
}
