package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/services/score"
)

// TestLeaderboardPastOneMessage: `arena leaderboard` and `arena history`
// against the real score service on chDB print 30,000 scores (7 MB of
// rows in JSON: past the embedded server's 1 MiB max_payload and `arena
// up`'s 2 MiB), one line each under the header, best first; the chunks
// are cut small (64 KiB) so that there are about a hundred of them.
func TestLeaderboardPastOneMessage(t *testing.T) {
	t.Setenv(EnvData, t.TempDir()) // no operator's seed: the open test server
	t.Setenv(app.EnvNATSCreds, "")
	b, srv := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	defer st.Close()
	_, err = store.Migrate(ctx, st)
	require.NoError(t, err)
	const n = 30_000
	rows := make([]store.Score, n)
	for i := range rows {
		rows[i] = store.Score{TsMs: 1_760_000_000_000 + uint64(i)*1000, SubmissionID: fmt.Sprintf("%016x", i+1), Policy: "lowb-score/v1",
			Campaign: "qwen3-8b", TaskID: "task", Participant: fmt.Sprintf("p%03d", i%200), Method: "GPTQ INT4 w4a16 g128",
			Split: "ranked", Score: float64(i) / n, EfficiencyGain: 1.5, Drift: 0.01, Qualified: 1, Ranked: 1, Payload: "{}"}
	}
	require.NoError(t, store.Insert(ctx, st, rows))
	s, err := score.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), score.Options{Store: st, Policy: "lowb-score/v1", ReplyChunkBytes: 64 << 10})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	actors := s.Actors()
	for _, a := range actors {
		go func() { _ = a.Run(runCtx); done <- struct{}{} }()
	}
	defer func() {
		stop()
		for range actors {
			<-done
		}
	}()

	for _, tc := range []struct {
		cmd   func(context.Context, []string, io.Writer, io.Writer) error
		args  []string
		lines int
		first string // the submission of the first row
	}{
		{cmdLeaderboard, nil, n, fmt.Sprintf("%016x", n)},
		{cmdHistory, nil, n, fmt.Sprintf("%016x", 1)},
		{cmdHistory, []string{"--participant", "p007"}, n / 200, fmt.Sprintf("%016x", 8)},
	} {
		var out, errOut bytes.Buffer
		require.NoError(t, tc.cmd(ctx, append([]string{"--nats", srv.ClientURL()}, tc.args...), &out, &errOut), errOut.String())
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		require.Len(t, lines, tc.lines+1, "a header and a line a score")
		require.True(t, strings.HasPrefix(lines[0], "WHEN"), lines[0])
		require.Equal(t, tc.first, strings.Fields(lines[1])[2], lines[1])
	}
}
