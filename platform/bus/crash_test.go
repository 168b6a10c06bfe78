package bus_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// crashEnv carries the parent's NATS URL to the child process.
const crashEnv = "LOWBARENA_BUS_CRASH_CHILD_URL"

const crashReady = "test.crash.ready"

// crashConsumer is the durable both processes bind to. AckWait is short so
// the redelivery after the kill comes quickly.
var crashConsumer = bus.ConsumerConfig{Name: "stage", Subjects: []string{events.FilterFor(events.SubmissionReceived)}, AckWait: time.Second}

// stageHandler is an idempotent stage: it publishes build.started with an id
// derived from the input's id, so every run publishes the same event.
func stageHandler(b *bus.Bus, after func(d *bus.Delivery, ack *jetstream.PubAck)) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) bus.Outcome {
		ack, err := b.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.BuildStarted)), events.BuildStarted,
			events.Source("builder"), d.Event.Subject(), &events.StageStartedData{SubmissionID: d.Event.Subject(), Stage: "build", Attempt: 1})
		if err != nil {
			return bus.Retry(50*time.Millisecond, err)
		}
		after(d, ack)
		return bus.Ack()
	}
}

// TestConsumerKilledMidMessage kills a consumer process after it published
// its output and before it acked: the input is redelivered, the second
// consumer publishes the same output id (deduplicated) and acks, and the
// stream holds exactly one output event.
func TestConsumerKilledMidMessage(t *testing.T) {
	if url := os.Getenv(crashEnv); url != "" {
		crashChild(t, url)
		return
	}
	b, srv := bustest.Bus(t)

	ready, err := b.Conn().SubscribeSync(crashReady)
	require.NoError(t, err)
	require.NoError(t, b.Conn().Flush())

	in := bustest.PublishSample(t, b, events.SubmissionReceived, "in-crash-1")

	child := exec.Command(os.Args[0], "-test.run=^TestConsumerKilledMidMessage$", "-test.count=1")
	child.Env = append(os.Environ(), crashEnv+"="+srv.ClientURL())
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	require.NoError(t, child.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})

	// The child says when it has published the output and is about to
	// (never) ack.
	sig, err := ready.NextMsg(wait)
	require.NoError(t, err, "the child never reached the point before its ack")
	require.Equal(t, "in-crash-1", string(sig.Data))
	outputs := streamMsgsOn(t, b, events.FilterFor(events.BuildStarted))
	require.Len(t, outputs, 1, "the child published its output")
	require.Equal(t, 1, bustest.ConsumerInfo(t, b, events.StreamArena, crashConsumer.Name).NumAckPending, "and did not ack")

	require.NoError(t, child.Process.Kill()) // SIGKILL: no deferred code, no ack
	_ = child.Wait()
	killed = true

	type run struct {
		delivered uint64
		duplicate bool
		id        string
	}
	runs := make(chan run, 4)
	bustest.Consume(t, b, crashConsumer, stageHandler(b, func(d *bus.Delivery, ack *jetstream.PubAck) {
		runs <- run{d.NumDelivered, ack.Duplicate, d.Event.ID()}
	}))
	var r run
	select {
	case r = <-runs:
	case <-time.After(wait):
		t.Fatal("the input was never redelivered")
	}
	require.Equal(t, "in-crash-1", r.id)
	require.Equal(t, uint64(2), r.delivered, "the second consumer got the redelivery")
	require.True(t, r.duplicate, "the republished output was deduplicated by its derived id")

	require.Eventually(t, func() bool {
		ci := bustest.ConsumerInfo(t, b, events.StreamArena, crashConsumer.Name)
		return ci.NumAckPending == 0 && ci.AckFloor.Stream == in.Sequence
	}, wait, 20*time.Millisecond, "the input is acked")

	outputs = streamMsgsOn(t, b, events.FilterFor(events.BuildStarted))
	require.Len(t, outputs, 1, "exactly one output event")
	require.Equal(t, events.DeriveID("in-crash-1", string(events.BuildStarted)), outputs[0].Header.Get("ce-id"))
	require.Len(t, bustest.StreamMsgs(t, b, events.StreamArena), 2, "the input and one output")
	require.Empty(t, bustest.StreamMsgs(t, b, events.StreamDLQ))
	select {
	case extra := <-runs:
		t.Fatalf("an unexpected further run: %+v", extra)
	default:
	}
}

// crashChild is the child process: it consumes, publishes the output, tells
// the parent, and blocks before acking until it is killed.
func crashChild(t *testing.T, url string) {
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	b, err := bus.New(nc)
	require.NoError(t, err)
	err = b.Consume(context.Background(), crashConsumer, stageHandler(b, func(d *bus.Delivery, _ *jetstream.PubAck) {
		_ = nc.Publish(crashReady, []byte(d.Event.ID()))
		_ = nc.Flush()
		select {} // killed here, between publishing and acking
	}))
	t.Fatalf("the child's Consume returned: %v", err)
}

// streamMsgsOn returns the ARENA messages on subjects matching filter.
func streamMsgsOn(t *testing.T, b *bus.Bus, filter string) []*jetstream.RawStreamMsg {
	t.Helper()
	var out []*jetstream.RawStreamMsg
	for _, m := range bustest.StreamMsgs(t, b, events.StreamArena) {
		if server.SubjectMatchesFilter(m.Subject, filter) {
			out = append(out, m)
		}
	}
	return out
}
