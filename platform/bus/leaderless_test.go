package bus_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// TestPublishWaitsForItsStream: a publish that no stream answers (in a
// cluster, a stream electing its leader after a node restarted) is asked
// again until the stream answers, for longer than nats.go's default half
// a second; the event is stored once.
func TestPublishWaitsForItsStream(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := tctx(t)
	js := b.JetStream()
	s, err := js.Stream(ctx, events.StreamArena)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	require.NoError(t, js.DeleteStream(ctx, events.StreamArena))
	back := make(chan error, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		_, err := js.CreateStream(ctx, cfg)
		back <- err
	}()
	ack := bustest.PublishSample(t, b, events.BuildStarted, "while-leaderless")
	require.NoError(t, <-back)
	require.Equal(t, uint64(1), ack.Sequence, "stored in the stream made again, once")
	require.Len(t, bustest.StreamMsgs(t, b, events.StreamArena), 1)
}
