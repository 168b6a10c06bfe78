package sandbox_test

import (
	"context"
	"testing"

	"github.com/lowbarena/lowbarena/adapters/sandbox"
)

// BenchmarkGradeCode is one sandboxed python run per op.
func BenchmarkGradeCode(b *testing.B) {
	needSandbox(b)
	g := &sandbox.CodeGrader{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := g.Grade(ctx, addItem, addRight)
		if err != nil || res.Score != 1 {
			b.Fatalf("grade: %+v, %v", res, err)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/run")
}

// BenchmarkSweepOrphans is one sweep of /proc for orphaned sandbox inits:
// the cost a run's end pays at most once every ten seconds.
func BenchmarkSweepOrphans(b *testing.B) {
	for b.Loop() {
		if _, err := sandbox.SweepOrphans(sandboxUID()); err != nil {
			b.Fatal(err)
		}
	}
}
