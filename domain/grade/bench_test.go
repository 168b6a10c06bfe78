package grade_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// reasoning is a typical chain of thought before the final answer.
const reasoning = "Let us work through it. The train covers 120 km in 1.5 hours, " +
	"so its speed is 80 km/h. Over 2.25 hours it covers 80 * 2.25 = 180 km, " +
	"then it stops for 15 minutes and covers another 1,020 km.\n"

func BenchmarkGradeNumeric(b *testing.B) {
	it := suite.Item{ID: "n", Grader: suite.GraderNumeric, Answer: "1200"}
	answer := reasoning + "In total 180 + 1,020 = 1,200 km.\nAnswer: 1,200"
	benchAnswers(b, it, answer)
}

func BenchmarkGradeChoice(b *testing.B) {
	it := suite.Item{ID: "c", Grader: suite.GraderChoice, Answer: "C", Choices: []string{"100", "180", "1200", "1020"}}
	answer := reasoning + "So the total is 1,200 km, which is choice C.\nAnswer: C"
	benchAnswers(b, it, answer)
}

// benchAnswers grades one right answer per op and reports answers/s.
func benchAnswers(b *testing.B, it suite.Item, answer string) {
	b.Helper()
	g, err := grade.For(it)
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := g.Grade(ctx, it, answer)
		if err != nil || res.Score != 1 {
			b.Fatalf("grade: %+v, %v", res, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "answers/s")
}
