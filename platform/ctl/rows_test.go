package ctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// scoreRows are n rows as the score service answers them (about 300
// bytes each in JSON), in a known order.
func scoreRows(n int) []ctl.Row {
	out := make([]ctl.Row, n)
	for i := range out {
		out[i] = ctl.Row{TsMs: 1_760_000_000_000 + uint64(i), SubmissionID: fmt.Sprintf("%016x", i), Policy: "lowb-score/v1", Campaign: "qwen3-8b",
			Participant: fmt.Sprintf("p%03d", i%200), Method: "GPTQ INT4 w4a16 g128", Split: "ranked", Score: float64(n-i) / float64(n), Gain: 1.5,
			Drift: 0.01, Qualified: 1, Ranked: 1, Reason: strings.Repeat("r", i%50)}
	}
	return out
}

// TestRowsInChunks: rows answered in chunks arrive whole and in order,
// each chunk within its bound and numbered, the last one marked; past
// one message's max_payload (the embedded server's 1 MiB, and 12,000
// rows: 3.9 MB, more than `arena up`'s 2 MiB too) an unchunked ask is
// refused with reply_too_large, a chunked one answered.
func TestRowsInChunks(t *testing.T) {
	nc := bustest.Connect(t, bustest.Server(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	svc, err := micro.AddService(nc, micro.Config{Name: "scores", Version: "1.0.0"})
	require.NoError(t, err)
	defer func() { _ = svc.Stop() }()
	// The query's Campaign is the number of rows to answer.
	answer := func(_ context.Context, q ctl.Query) ([]ctl.Row, error) {
		n, err := strconv.Atoi(q.Campaign)
		if err != nil {
			return nil, ctl.Refuse(ctl.CodeBadRequest, "campaign %q is not a count", q.Campaign)
		}
		return scoreRows(n), nil
	}
	require.NoError(t, ctl.RowsEndpoint(ctx, svc, nc, "small", "test.rows.small", 10*time.Second, 4096, answer))
	require.NoError(t, ctl.RowsEndpoint(ctx, svc, nc, "full", "test.rows.full", 10*time.Second, 0, answer))

	tests := []struct {
		subject    string
		rows       int
		bound      int // a chunk's body at most
		wantChunks int // at least
	}{
		{"test.rows.small", 0, 4096, 1},
		{"test.rows.small", 1, 4096, 1},
		{"test.rows.small", 3000, 4096, 3000 * 280 / 4096},
		{"test.rows.full", 10, int(nc.MaxPayload()), 1},
		{"test.rows.full", 12000, int(nc.MaxPayload()), 12000 * 280 / int(nc.MaxPayload())},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.subject, tc.rows), func(t *testing.T) {
			got, err := ctl.CallRows(ctx, nc, tc.subject, ctl.Query{Campaign: strconv.Itoa(tc.rows)})
			require.NoError(t, err)
			require.Equal(t, scoreRows(tc.rows), got)

			// The wire: the chunks as a raw subscriber sees them.
			inbox := nats.NewInbox()
			sub, err := nc.SubscribeSync(inbox)
			require.NoError(t, err)
			defer func() { _ = sub.Unsubscribe() }()
			body, _ := json.Marshal(ctl.Query{Campaign: strconv.Itoa(tc.rows), Chunked: true})
			require.NoError(t, nc.PublishRequest(tc.subject, inbox, body))
			total, bytes := 0, 0
			for i := 0; ; i++ {
				msg, err := sub.NextMsgWithContext(ctx)
				require.NoError(t, err)
				require.Equal(t, strconv.Itoa(i), msg.Header.Get(ctl.HeaderChunk))
				require.LessOrEqual(t, len(msg.Data), tc.bound)
				var rep ctl.Rows
				require.NoError(t, json.Unmarshal(msg.Data, &rep))
				require.True(t, len(rep.Rows) > 0 || tc.rows == 0, "chunk %d is empty", i)
				total += len(rep.Rows)
				bytes += len(msg.Data)
				if msg.Header.Get(ctl.HeaderChunkLast) != "" {
					require.GreaterOrEqual(t, i+1, tc.wantChunks)
					break
				}
			}
			require.Equal(t, tc.rows, total)
			if tc.rows == 12000 {
				require.Greater(t, bytes, 2<<20, "this case is to pass 2 MiB")
			}
		})
	}

	// One message, as a client that does not ask for chunks: past
	// max_payload, a refusal that says what to do.
	_, err = ctl.Call[ctl.Rows](ctx, nc, "test.rows.full", ctl.Query{Campaign: "12000"})
	var e *ctl.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, reason.ReplyTooLarge, e.Reason)
	require.Contains(t, e.Message, "12000 rows")
	rep, err := ctl.Call[ctl.Rows](ctx, nc, "test.rows.full", ctl.Query{Campaign: "3"})
	require.NoError(t, err)
	require.Equal(t, scoreRows(3), rep.Rows)

	// A refusal comes back as one, chunked or not.
	_, err = ctl.CallRows(ctx, nc, "test.rows.full", ctl.Query{Campaign: "many"})
	require.ErrorAs(t, err, &e)
	require.Equal(t, ctl.CodeBadRequest, e.Code)
	require.Contains(t, e.Message, "not a count")

	_, err = ctl.CallRows(ctx, nc, "test.rows.nobody", ctl.Query{})
	require.ErrorIs(t, err, ctl.ErrNoService)
}

// TestCallRowsAgainstOtherServices: a responder that does not chunk (one
// reply, no chunk header) is read as the whole answer; one whose chunks
// skip a number, or stop before the last, fails with reply_incomplete,
// never a partial answer.
func TestCallRowsAgainstOtherServices(t *testing.T) {
	nc := bustest.Connect(t, bustest.Server(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc, err := micro.AddService(nc, micro.Config{Name: "old", Version: "1.0.0"})
	require.NoError(t, err)
	defer func() { _ = svc.Stop() }()
	require.NoError(t, ctl.Endpoint(ctx, svc, "rows", "test.old", time.Second, func(context.Context, ctl.Query) (ctl.Rows, error) {
		return ctl.Rows{Rows: scoreRows(5)}, nil
	}))
	got, err := ctl.CallRows(ctx, nc, "test.old", ctl.Query{})
	require.NoError(t, err)
	require.Equal(t, scoreRows(5), got)

	chunk := func(i int, last bool) *nats.Msg {
		m := nats.NewMsg("")
		m.Header.Set(ctl.HeaderChunk, strconv.Itoa(i))
		if last {
			m.Header.Set(ctl.HeaderChunkLast, "true")
		}
		m.Data, _ = json.Marshal(ctl.Rows{Rows: scoreRows(2)})
		return m
	}
	for _, tc := range []struct {
		subject string
		send    []*nats.Msg
	}{
		{"test.gap", []*nats.Msg{chunk(0, false), chunk(2, true)}},
		{"test.cut", []*nats.Msg{chunk(0, false), chunk(1, false)}},
	} {
		sub, err := nc.Subscribe(tc.subject, func(req *nats.Msg) {
			for _, m := range tc.send {
				m.Subject = req.Reply
				_ = nc.PublishMsg(m)
			}
		})
		require.NoError(t, err)
		short, stop := context.WithTimeout(ctx, 2*time.Second)
		_, err = ctl.CallRows(short, nc, tc.subject, ctl.Query{})
		stop()
		var e *ctl.Error
		require.ErrorAs(t, err, &e, tc.subject)
		require.Equal(t, reason.ReplyIncomplete, e.Reason, tc.subject)
		require.NoError(t, sub.Unsubscribe())
	}
}
