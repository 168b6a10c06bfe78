package workqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// The helpers below are platform/bus's test helpers of the same names.

// wait bounds every wait for something to arrive; it is never a speed
// assertion.
const wait = 15 * time.Second

func tctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// consume runs b.Consume in the background until the end of the test and
// requires that it returned without error.
func consume(t *testing.T, b *bus.Bus, cfg bus.ConsumerConfig, h bus.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Consume(ctx, cfg, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err)
		case <-time.After(wait):
			t.Error("Consume did not return after its context ended")
		}
	})
}

// publishSample publishes the sample payload of typ with the given id.
func publishSample(t *testing.T, b *bus.Bus, typ events.Type, id string) *jetstream.PubAck {
	t.Helper()
	ack, err := b.PublishNew(tctx(t), id, typ, events.Source("test"), bustest.SampleSubject, bustest.Sample(typ))
	require.NoError(t, err)
	return ack
}

// streamMsgs returns every message stored in a stream, in order.
func streamMsgs(t *testing.T, b *bus.Bus, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := tctx(t)
	s, err := b.JetStream().Stream(ctx, name)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	if info.State.Msgs == 0 {
		return nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (work queue) messages leave gaps
		}
		out = append(out, m)
	}
	return out
}

func consumerInfo(t *testing.T, b *bus.Bus, stream, name string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := b.JetStream().Consumer(tctx(t), stream, name)
	require.NoError(t, err)
	info, err := c.Info(tctx(t))
	require.NoError(t, err)
	return info
}
