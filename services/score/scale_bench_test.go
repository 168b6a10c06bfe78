package score

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
)

// BenchmarkScoresScale is the scale curve of the score rows behind `arena
// leaderboard` and `arena history`: the scores table on chDB holds 1,000,
// 10,000 and 100,000 rows (one per submission, 4 campaigns, 200
// participants, each with a 1 KB payload as the score events carry), and
// at each size it times the leaderboard of one campaign (a quarter of the
// rows come back) and one participant's history (1/200 of them), the SQL
// the score service runs. It reports each query's time per row held: flat
// is linear.
func BenchmarkScoresScale(b *testing.B) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "scores-scale-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	st, err := store.Open(ctx, "chdb://"+dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if _, err := store.Migrate(ctx, st); err != nil {
		b.Fatal(err)
	}
	const policy = "lowb-score/v1"
	payload := `{"detail":"` + strings.Repeat("x", 1000) + `"}`
	held := 0
	fill := func(n int) {
		rows := make([]store.Score, 0, n-held)
		for i := held; i < n; i++ {
			rows = append(rows, store.Score{TsMs: 1_760_000_000_000 + uint64(i)*1000, SubmissionID: fmt.Sprintf("%016x", i+1), Policy: policy,
				Campaign: fmt.Sprintf("campaign-%d", i%4), TaskID: "task", Participant: fmt.Sprintf("p%03d", i%200), Method: []string{"FP8", "INT4", "NVFP4"}[i%3],
				Split: "ranked", Score: float64(i%1000) / 1000, EfficiencyGain: 1.5, Drift: 0.01, Qualified: uint8(i % 2), Ranked: 1, Payload: payload})
		}
		for len(rows) > 0 {
			k := min(len(rows), 10_000)
			if err := store.Insert(ctx, st, rows[:k]); err != nil {
				b.Fatal(err)
			}
			rows = rows[k:]
		}
		held = n
	}
	for _, n := range []int{1000, 10_000, 100_000} {
		fill(n)
		for _, q := range []struct {
			name string
			sql  string
			args []any
			want int
		}{
			{"leaderboard", leaderboardSQL, []any{policy, "campaign-1", "campaign-1"}, n / 4},
			{"history", historySQL, []any{"p007", "p007", "", "", "", ""}, n / 200},
		} {
			b.Run(fmt.Sprintf("%s/rows=%d", q.name, n), func(b *testing.B) {
				for b.Loop() {
					var out []ctl.Row
					if err := st.Select(ctx, &out, q.sql, q.args...); err != nil {
						b.Fatal(err)
					}
					if len(out) != q.want {
						b.Fatalf("%d rows, not %d", len(out), q.want)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/row-held")
			})
		}
	}
}
