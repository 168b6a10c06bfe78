package bus

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// beatMsg is a message in hand that counts the InProgress it is sent.
type beatMsg struct {
	jetstream.Msg
	beats atomic.Int32
}

func (m *beatMsg) InProgress() error { m.beats.Add(1); return nil }

// TestOneTickerBeatsEveryMessageInHand: the consumer's one heartbeat
// sends InProgress to every message whose handler still runs, again and
// again, and to none once its handler has ended.
func TestOneTickerBeatsEveryMessageInHand(t *testing.T) {
	hb := newHeartbeat(20*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go hb.run()
	defer hb.stop()
	msgs := make([]*beatMsg, 8)
	for i := range msgs {
		msgs[i] = &beatMsg{}
		hb.add(msgs[i])
	}
	require.Eventually(t, func() bool {
		for _, m := range msgs {
			if m.beats.Load() < 3 {
				return false
			}
		}
		return true
	}, 15*time.Second, 5*time.Millisecond, "every message in hand is beaten, repeatedly")
	var wg sync.WaitGroup
	for _, m := range msgs[:4] {
		wg.Go(func() { hb.remove(m) })
	}
	wg.Wait()
	ended := make([]int32, 4)
	for i, m := range msgs[:4] {
		ended[i] = m.beats.Load()
	}
	kept := msgs[4].beats.Load()
	require.Eventually(t, func() bool { return msgs[4].beats.Load() >= kept+3 }, 15*time.Second, 5*time.Millisecond,
		"the messages still in hand go on being beaten")
	for i, m := range msgs[:4] {
		require.Equal(t, ended[i], m.beats.Load(), "a message whose handler ended is beaten no more")
	}
}
