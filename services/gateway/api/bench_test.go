package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/ctl"
)

// BenchmarkLeaderboardPage draws the leaderboard page of rows scores over
// loopback HTTP: the score service's answer (a responder on the embedded
// NATS), each row's record read to say whether it is simulated, and the
// page rendered. It reports the cost per page and per row.
func BenchmarkLeaderboardPage(b *testing.B) {
	for _, rows := range []int{10, 100, 500} {
		b.Run(fmt.Sprint(rows), func(b *testing.B) {
			f := newFixture(b, nil)
			ctx := context.Background()
			var rep ctl.Rows
			for i := range rows {
				id := fmt.Sprintf("s%04d", i)
				rep.Rows = append(rep.Rows, ctl.Row{TsMs: uint64(1_782_900_000_000 + i), SubmissionID: id, Participant: "alice", Method: "FP8",
					Campaign: "qwen3-tiny", Policy: "lowb-score/v1", Split: "ranked", Ranked: 1, Qualified: uint8(i % 2), Score: float64(i) / 1000})
				rec, err := json.Marshal(map[string]any{"id": id, "participant": "alice", "split": "ranked", "status": "done",
					"result": map[string]any{"simulated": i%3 == 0, "gpu": "NVIDIA H200 (simulated)"}})
				require.NoError(b, err)
				_, err = f.records.Put(ctx, id, rec)
				require.NoError(b, err)
			}
			answer, err := json.Marshal(rep)
			require.NoError(b, err)
			sub, err := f.b.Conn().Subscribe(ctl.SubjectLeaderboard, func(m *nats.Msg) { _ = m.Respond(answer) })
			require.NoError(b, err)
			b.Cleanup(func() { _ = sub.Unsubscribe() })
			require.NoError(b, f.b.Conn().Flush())
			b.ResetTimer()
			for b.Loop() {
				resp, err := http.Get(f.srv.URL + "/leaderboard")
				require.NoError(b, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				require.Equal(b, http.StatusOK, resp.StatusCode)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(rows), "µs/row")
		})
	}
}
