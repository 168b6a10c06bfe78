package bus_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/schemas"
)

// TestOutsideClientsModes publishes submission.received as clients outside
// the arena do (binary mode with the arena's headers, binary without
// ce-subject, structured with Content-Type, structured without any header
// as the CloudEvents SDK's plain NATS binding sends it) and requires that
// each reaches the handler with its subject, and that what the handler
// publishes in answer is in the mode of its input, with its dataschema set.
func TestOutsideClientsModes(t *testing.T) {
	b, _ := bustest.Bus(t)
	rec := newRecorder()
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "modes", Subjects: []string{events.FilterFor(events.SubmissionReceived)}},
		func(ctx context.Context, d *bus.Delivery) bus.Outcome {
			rec.add(d)
			_, err := b.PublishNew(ctx, events.DeriveID(d.Event.ID(), "started"), events.BuildStarted, events.Source("test"), d.Event.Subject(),
				events.StageStartedData{SubmissionID: d.Event.Subject(), Stage: "build", Attempt: 1})
			if err != nil {
				return bus.Retry(0, err)
			}
			return bus.Ack()
		})

	data := func(id string) []byte {
		s := *bustest.Sample(events.SubmissionReceived).(*events.SubmissionReceivedData)
		s.SubmissionID = id
		raw, err := json.Marshal(s)
		require.NoError(t, err)
		return raw
	}
	structured := func(id string, withSubject bool) []byte {
		env := map[string]any{"specversion": "1.0", "id": "ev-" + id, "source": "/participants/example-team",
			"type": string(events.SubmissionReceived), "datacontenttype": "application/json", "data": json.RawMessage(data(id))}
		if withSubject {
			env["subject"] = id
		}
		raw, err := json.Marshal(env)
		require.NoError(t, err)
		return raw
	}
	binary := func(id string, withSubject bool) nats.Header {
		h := nats.Header{"ce-specversion": {"1.0"}, "ce-id": {`"ev-` + id + `"`}, "ce-source": {"/participants/example-team"},
			"ce-type": {string(events.SubmissionReceived)}, "Nats-Msg-Id": {"ev-" + id}}
		if withSubject {
			h.Set("ce-subject", id)
		}
		return h
	}
	cases := []struct {
		name string
		id   string
		msg  func(id string) *nats.Msg
		want ce.Mode
	}{
		{"binary", "cli0000000000001", func(id string) *nats.Msg { return &nats.Msg{Header: binary(id, true), Data: data(id)} }, ce.Binary},
		{"binary without ce-subject, quoted id", "cli0000000000002", func(id string) *nats.Msg { return &nats.Msg{Header: binary(id, false), Data: data(id)} }, ce.Binary},
		{"structured", "cli0000000000003", func(id string) *nats.Msg {
			return &nats.Msg{Header: nats.Header{"Content-Type": {ce.ContentTypeStructured}}, Data: structured(id, true)}
		}, ce.Structured},
		{"structured without subject", "cli0000000000004", func(id string) *nats.Msg {
			return &nats.Msg{Header: nats.Header{"Content-Type": {ce.ContentTypeStructured}}, Data: structured(id, false)}
		}, ce.Structured},
		{"structured without any header", "cli0000000000005", func(id string) *nats.Msg { return &nats.Msg{Data: structured(id, false)} }, ce.Structured},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.msg(tc.id)
			msg.Subject = "arena.submission.received." + tc.id
			_, err := b.JetStream().PublishMsg(tctx(t), msg)
			require.NoError(t, err)
			d := rec.next(t)
			require.Equal(t, "ev-"+tc.id, d.Event.ID())
			require.Equal(t, tc.id, d.Event.Subject(), "the subject, from the attribute or the data")
			var got events.SubmissionReceivedData
			require.NoError(t, d.Decode(&got))
			require.Equal(t, tc.id, got.SubmissionID)

			var out []*nats.Header
			require.Eventually(t, func() bool {
				out = out[:0]
				for _, m := range bustest.StreamMsgs(t, b, events.StreamArena) {
					if m.Subject == "arena.build.started."+tc.id {
						out = append(out, &m.Header)
						require.Equal(t, tc.want, ce.Detect(m.Header, m.Data), "the answer is in the mode of the input")
						ev, err := ce.Decode(m.Header, m.Data)
						require.NoError(t, err)
						require.Equal(t, schemas.EventSchemaURI(string(events.BuildStarted)), ev.DataSchema())
						require.Equal(t, tc.id, ev.Subject())
						if tc.want == ce.Structured {
							require.Equal(t, ce.ContentTypeStructured, m.Header.Get("Content-Type"))
							for k := range m.Header {
								require.False(t, strings.HasPrefix(strings.ToLower(k), "ce-"), "structured mode sends no %s", k)
							}
						} else {
							require.Equal(t, schemas.EventSchemaURI(string(events.BuildStarted)), m.Header.Get(ce.HeaderDataSchema))
						}
						require.Equal(t, ev.ID(), m.Header.Get(ce.HeaderMsgID))
					}
				}
				return len(out) == 1
			}, wait, 20*time.Millisecond)
		})
	}
}
