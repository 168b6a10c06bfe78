package stats_test

import (
	"testing"

	"github.com/lowbarena/lowbarena/domain/stats"
)

// BenchmarkDomain100k times Domain over 100,000 paired items and reports
// the items processed per second.
func BenchmarkDomain100k(b *testing.B) {
	const n = 100_000
	ps := randomPairs(42, n)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stats.Domain(ps); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*n/b.Elapsed().Seconds(), "items/s")
}
