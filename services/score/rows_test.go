package score_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
)

// TestLeaderboardPastOneMessage: 20,000 scores (about 5 MB of rows in
// JSON, more than the embedded server's 1 MiB max_payload and `arena
// up`'s 2 MiB) answer the leaderboard and the history whole, in the
// order the statement promises (derived here from the rows written),
// when asked in chunks; asked in one message, the leaderboard is refused
// with reply_too_large and a sentence that says what to do.
func TestLeaderboardPastOneMessage(t *testing.T) {
	b, st, ctx := env(t)
	const policy, n = "lowb-score/v1", 20_000
	rows := make([]store.Score, n)
	for i := range rows {
		rows[i] = store.Score{TsMs: 1_760_000_000_000 + uint64(i)*1000, SubmissionID: fmt.Sprintf("%016x", i+1), Policy: policy,
			Campaign: fmt.Sprintf("campaign-%d", i%2), TaskID: "task", Participant: fmt.Sprintf("p%03d", i%200), Method: "GPTQ INT4 w4a16 g128",
			Split: "ranked", Score: float64(i%997) / 997, EfficiencyGain: 1.5, Drift: 0.01, Qualified: uint8(i % 3 % 2), Ranked: 1, Payload: "{}"}
	}
	require.NoError(t, store.Insert(ctx, st, rows))
	stop := start(t, ctx, b, st)
	defer stop()
	nc := b.Conn()

	want := func(keep func(store.Score) bool, less func(x, y store.Score) bool) []string {
		var ks []store.Score
		for _, r := range rows {
			if keep(r) {
				ks = append(ks, r)
			}
		}
		sort.SliceStable(ks, func(i, j int) bool { return less(ks[i], ks[j]) })
		ids := make([]string, len(ks))
		for i, r := range ks {
			ids[i] = r.SubmissionID
		}
		return ids
	}
	ids := func(rs []ctl.Row) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = r.SubmissionID
		}
		return out
	}
	board := func(x, y store.Score) bool {
		if x.Qualified != y.Qualified {
			return x.Qualified > y.Qualified
		}
		if x.Score != y.Score {
			return x.Score > y.Score
		}
		return x.TsMs < y.TsMs
	}
	byTime := func(x, y store.Score) bool { return x.TsMs < y.TsMs }
	tests := []struct {
		name    string
		subject string
		q       ctl.Query
		want    []string
	}{
		{"leaderboard", ctl.SubjectLeaderboard, ctl.Query{Policy: policy}, want(func(store.Score) bool { return true }, board)},
		{"leaderboard of a campaign", ctl.SubjectLeaderboard, ctl.Query{Policy: policy, Campaign: "campaign-1"},
			want(func(r store.Score) bool { return r.Campaign == "campaign-1" }, board)},
		{"history", ctl.SubjectHistory, ctl.Query{}, want(func(store.Score) bool { return true }, byTime)},
		{"history of a participant", ctl.SubjectHistory, ctl.Query{Participant: "p007"}, want(func(r store.Score) bool { return r.Participant == "p007" }, byTime)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ctl.CallRowsWaiting(ctx, nc, tc.subject, tc.q, 10*time.Second)
			require.NoError(t, err)
			require.Equal(t, tc.want, ids(got))
		})
	}
	_, err := ctl.Call[ctl.Rows](ctx, nc, ctl.SubjectLeaderboard, ctl.Query{Policy: policy})
	var e *ctl.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, reason.ReplyTooLarge, e.Reason)
	require.Contains(t, e.Message, "20000 rows")
}
