package query_test

import (
	"testing"

	"github.com/lowbarena/lowbarena/platform/store/query"
)

// BenchmarkCheck checks the README's leaderboard statement with a comment:
// what the service spends before the engine sees a query.
func BenchmarkCheck(b *testing.B) {
	const sql = `-- leaderboard of a policy, best first
SELECT submission_id, participant, method, score, efficiency_gain, drift, qualified, ranked, reason
FROM scores FINAL WHERE policy = 'lowb-score/v1' AND campaign = 'qwen3-tiny'
ORDER BY qualified DESC, score DESC;`
	b.SetBytes(int64(len(sql)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := query.Check(sql); err != nil {
			b.Fatal(err)
		}
	}
}
