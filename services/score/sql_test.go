package score_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/query"
)

// TestSQL asks the query service what `arena sql` asks, over NATS: a
// statement's columns and rows with its limits, and each refusal with its
// stable reason beside micro's code.
func TestSQL(t *testing.T) {
	b, st, ctx := env(t)
	stop := start(t, ctx, b, st)
	defer stop()
	require.NoError(t, store.Insert(ctx, st, []store.Score{
		{TsMs: 1_700_000_000_000, SubmissionID: "a1", Policy: "lowb-score/v1", Campaign: "tiny", Participant: "p", Method: "FP8", Split: "dev", Score: 0.125, Qualified: 1},
	}))
	nc := b.Conn()

	rep, err := call[ctl.SQLReply](t, ctx, nc, ctl.SubjectSQL, ctl.SQLRequest{SQL: "SELECT submission_id, score FROM scores FINAL"})
	require.NoError(t, err)
	require.Equal(t, query.KindSelect, rep.Kind)
	require.Equal(t, []ctl.SQLColumn{{Name: "submission_id", Type: "String"}, {Name: "score", Type: "Float64"}}, rep.Columns)
	require.Equal(t, [][]json.RawMessage{{json.RawMessage(`"a1"`), json.RawMessage(`0.125`)}}, rep.Rows)
	require.Empty(t, rep.Truncated)
	require.Equal(t, query.DefaultMaxRows, rep.MaxRows)
	require.Equal(t, int(query.DefaultTimeout/time.Second), rep.TimeoutSeconds)
	require.Equal(t, st.Engine(), rep.Engine)

	rep, err = call[ctl.SQLReply](t, ctx, nc, ctl.SubjectSQL, ctl.SQLRequest{SQL: "SELECT number FROM system.numbers", MaxRows: 3, TimeoutSeconds: 5})
	require.NoError(t, err)
	require.Len(t, rep.Rows, 3)
	require.Equal(t, "rows", rep.Truncated)
	require.Equal(t, 5, rep.TimeoutSeconds)

	cases := []struct {
		name   string
		req    ctl.SQLRequest
		reason reason.Code
		says   string
	}{
		{"a write", ctl.SQLRequest{SQL: "DROP TABLE scores"}, reason.SQLNotReadOnly, "DROP is not read-only"},
		{"two statements", ctl.SQLRequest{SQL: "SELECT 1; DROP TABLE scores"}, reason.SQLManyStatements, "more than one"},
		{"past its limit", ctl.SQLRequest{SQL: "SELECT count() FROM numbers(100000000000)", TimeoutSeconds: 1}, reason.SQLTimeout, "limit of 1s"},
		{"malformed", ctl.SQLRequest{SQL: "SELECT 'abc"}, reason.SQLMalformed, "not closed"},
		{"a syntax error", ctl.SQLRequest{SQL: "SELECT 1 +"}, reason.SQLSyntaxError, "cannot parse"},
		{"a limit out of range", ctl.SQLRequest{SQL: "SELECT 1", MaxRows: -1}, reason.SQLBadLimits, "max rows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ctl.Call[ctl.SQLReply](ctx, nc, ctl.SubjectSQL, tc.req)
			var e *ctl.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, ctl.CodeBadRequest, e.Code)
			require.Equal(t, tc.reason, e.Reason)
			require.Contains(t, e.Message, tc.says)
		})
	}
	var n []struct {
		N uint64 `ch:"n"`
	}
	require.NoError(t, st.Select(ctx, &n, "SELECT count() AS n FROM scores"))
	require.Equal(t, uint64(1), n[0].N, "the table is still there")

	m, err := nc.RequestWithContext(ctx, "$SRV.INFO."+ctl.ServiceQuery, nil)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(m.Data, &info))
	require.Len(t, info.Endpoints, 1)
	require.Equal(t, ctl.SubjectSQL, info.Endpoints[0].Subject)
}
