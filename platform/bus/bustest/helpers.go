package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Wait bounds every wait of these helpers for something to arrive; it is
// never a speed assertion.
const Wait = 15 * time.Second

// testContext returns a context that ends with the test or after 30 s.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Consume runs b.Consume in the background until the end of the test and
// requires that it returned without error once its context ended.
func Consume(t testing.TB, b *bus.Bus, cfg bus.ConsumerConfig, h bus.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Consume(ctx, cfg, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-time.After(Wait):
			t.Error("Consume did not return after its context ended")
		}
	})
}

// PublishSample publishes the sample payload of typ (see Sample) with the
// given id, on SampleSubject.
func PublishSample(t testing.TB, b *bus.Bus, typ events.Type, id string) *jetstream.PubAck {
	t.Helper()
	ack, err := b.PublishNew(testContext(t), id, typ, events.Source("test"), SampleSubject, Sample(typ))
	require.NoError(t, err)
	return ack
}

// StreamMsgs returns every message stored in a stream, in order; the gaps
// a work queue leaves where it deleted messages are skipped.
func StreamMsgs(t testing.TB, b *bus.Bus, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := testContext(t)
	s, err := b.JetStream().Stream(ctx, name)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	if info.State.Msgs == 0 {
		return nil
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		out = append(out, m)
	}
	return out
}

// ConsumerInfo returns a durable consumer's info as the server has it.
func ConsumerInfo(t testing.TB, b *bus.Bus, stream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := testContext(t)
	c, err := b.JetStream().Consumer(ctx, stream, name)
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	return info
}
