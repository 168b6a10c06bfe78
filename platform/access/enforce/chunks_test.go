package enforce_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// TestChunkedRepliesUnderPermissions: under the permission table, as
// `arena up` and the cluster's auth.conf apply it, the score user may
// send a reply of rows in many chunks (allow_responses' default of one
// reply per request refused every chunk after the first), and the
// gateway gets them all.
func TestChunkedRepliesUnderPermissions(t *testing.T) {
	for name, start := range map[string]func(*testing.T) *arena{"embedded": func(t *testing.T) *arena { return embedded(t) }, "deployed": deployed} {
		t.Run(name, func(t *testing.T) {
			a := start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nc := a.connect(t, access.Score)
			svc, err := micro.AddService(nc, micro.Config{Name: ctl.ServiceScore, Version: "1.0.0"})
			require.NoError(t, err)
			defer func() { _ = svc.Stop() }()
			rows := make([]ctl.Row, 3000)
			for i := range rows {
				rows[i] = ctl.Row{SubmissionID: fmt.Sprintf("%016x", i), Policy: "lowb-score/v1", Campaign: "c", Participant: "p", Split: "ranked"}
			}
			require.NoError(t, ctl.RowsEndpoint(ctx, svc, nc, "leaderboard", ctl.SubjectLeaderboard, 10*time.Second, 4096,
				func(context.Context, ctl.Query) ([]ctl.Row, error) { return rows, nil }))
			got, err := ctl.CallRowsWaiting(ctx, a.connect(t, access.Gateway), ctl.SubjectLeaderboard, ctl.Query{}, 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, rows, got)
		})
	}
}
