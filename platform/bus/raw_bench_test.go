package bus_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ce"
)

// The raw floor: what nats.go alone does for the same hop on the same
// server, with the same guarantees the arena gives. The raw publisher sends
// the same bytes (the event's binary-mode headers, encoded once, its body
// and a Nats-Msg-Id, so the server deduplicates it as it does the arena's)
// and waits for the stream's acknowledgement; the raw consumer is a durable
// pull consumer (nats.go's Consume, explicit acks) that acks each message
// after its handler, without waiting for the server to confirm the ack.
// Everything the arena adds (schema validation, CloudEvents decoding,
// trace context, metrics, the permission guard, heartbeats, outcomes) is
// what the ratio measures.

// rawPublisher publishes pre-encoded copies of one event with fresh ids.
type rawPublisher struct {
	js      jetstream.JetStream
	subject string
	header  nats.Header
	data    []byte
}

func newRawPublisher(b testing.TB, js jetstream.JetStream, subject string) *rawPublisher {
	e, err := events.NewEvent("raw", events.BuildStarted, events.Source("bench"), subject, bustest.Sample(events.BuildStarted))
	if err != nil {
		b.Fatal(err)
	}
	msg, err := ce.Encode(e)
	if err != nil {
		b.Fatal(err)
	}
	return &rawPublisher{js: js, subject: events.SubjectRootArena + ".build.started." + subject, header: msg.Header, data: msg.Data}
}

func (p *rawPublisher) publish(ctx context.Context, id string) error {
	h := make(nats.Header, len(p.header))
	for k, v := range p.header {
		h[k] = v
	}
	h[ce.HeaderID] = []string{id}
	h[ce.HeaderMsgID] = []string{id}
	_, err := p.js.PublishMsg(ctx, &nats.Msg{Subject: p.subject, Header: h, Data: p.data}, jetstream.WithExpectStream(events.StreamArena))
	return err
}

// rawConsume runs a durable pull consumer that acks every message after
// handle, until ctx ends.
func rawConsume(ctx context.Context, b testing.TB, js jetstream.JetStream, name, filter string, handle func(jetstream.Msg)) {
	c, err := js.CreateOrUpdateConsumer(ctx, events.StreamArena, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: filter, MaxAckPending: 1024,
	})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		handle(m)
		_ = m.Ack()
	}, jetstream.PullMaxMessages(256))
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		cc.Stop()
	}()
}

// arenaConsume runs bus.Consume with the default consumer settings until
// ctx ends.
func arenaConsume(ctx context.Context, b testing.TB, bs *bus.Bus, name, filter string, handle func(*bus.Delivery)) (wait func()) {
	done := make(chan error, 1)
	go func() {
		done <- bs.Consume(ctx, bus.ConsumerConfig{Name: name, Subjects: []string{filter}},
			func(_ context.Context, d *bus.Delivery) bus.Outcome {
				handle(d)
				return bus.Ack()
			})
	}()
	return func() {
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}

func quietBus(b testing.TB) *bus.Bus {
	bs, _ := bustest.Bus(b, bus.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	return bs
}

// BenchmarkHopVsRaw measures one event hop, from the call that publishes
// it to the moment its handler starts, for the raw floor and the arena in
// turn on the same server: each op is one raw hop and one arena hop, each
// publish waited for (its stream acknowledgement, and its handler) before
// the next, so the percentiles compare like with like under the same
// load. It reports each side's p50 and p99 in µs and the arena over raw.
func BenchmarkHopVsRaw(b *testing.B) {
	bs := quietBus(b)
	ctx, cancel := context.WithCancel(context.Background())
	rawSeen := make(chan time.Time, 1)
	arenaSeen := make(chan time.Time, 1)
	rawConsume(ctx, b, bs.JetStream(), "hop-raw", "arena.build.started.hopraw", func(jetstream.Msg) { rawSeen <- time.Now() })
	wait := arenaConsume(ctx, b, bs, "hop-arena", "arena.build.started.hoparena", func(*bus.Delivery) { arenaSeen <- time.Now() })
	b.Cleanup(func() { cancel(); wait() })
	raw := newRawPublisher(b, bs.JetStream(), "hopraw")
	pctx := context.Background()
	await := func(ch chan time.Time) time.Time {
		select {
		case t := <-ch:
			return t
		case <-time.After(15 * time.Second):
			b.Fatal("event not handled")
			return time.Time{}
		}
	}
	hopRaw := func(i int) time.Duration {
		t0 := time.Now()
		if err := raw.publish(pctx, "raw-"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
		return await(rawSeen).Sub(t0)
	}
	hopArena := func(i int) time.Duration {
		t0 := time.Now()
		if _, err := bs.PublishNew(pctx, "arena-"+strconv.Itoa(i), events.BuildStarted, events.Source("bench"), "hoparena", startedData(i)); err != nil {
			b.Fatal(err)
		}
		return await(arenaSeen).Sub(t0)
	}
	for i := range 50 { // warm up both paths
		hopRaw(-1 - i)
		hopArena(-1 - i)
	}
	var rawT, arenaT []time.Duration
	for i := 0; b.Loop(); i++ {
		// Alternate which goes first, so neither always follows the other.
		if i%2 == 0 {
			rawT = append(rawT, hopRaw(i))
			arenaT = append(arenaT, hopArena(i))
		} else {
			arenaT = append(arenaT, hopArena(i))
			rawT = append(rawT, hopRaw(i))
		}
	}
	r50, r99 := percentile(rawT, 0.50), percentile(rawT, 0.99)
	a50, a99 := percentile(arenaT, 0.50), percentile(arenaT, 0.99)
	b.ReportMetric(us(r50), "raw-p50-µs")
	b.ReportMetric(us(r99), "raw-p99-µs")
	b.ReportMetric(us(a50), "arena-p50-µs")
	b.ReportMetric(us(a99), "arena-p99-µs")
	b.ReportMetric(float64(a50)/float64(r50), "ratio-p50")
	b.ReportMetric(float64(a99)/float64(r99), "ratio-p99")
}

// BenchmarkSustainedVsRaw measures sustained throughput: 64 publishers,
// each publishing its share of a burst and waiting for every stream
// acknowledgement, into one durable consumer, for the raw floor and the
// arena in turn on the same server. A burst ends when the consumer has
// handled its last event; each op is one raw burst and one arena burst.
// It reports each side's events per second and the arena over raw.
func BenchmarkSustainedVsRaw(b *testing.B) {
	const publishers, perPublisher = 64, 100
	const burst = publishers * perPublisher
	bs := quietBus(b)
	ctx, cancel := context.WithCancel(context.Background())
	var rawN, arenaN atomic.Int64
	rawDone, arenaDone := make(chan struct{}, 1), make(chan struct{}, 1)
	count := func(n *atomic.Int64, done chan struct{}) {
		if n.Add(1)%burst == 0 {
			done <- struct{}{}
		}
	}
	rawConsume(ctx, b, bs.JetStream(), "sus-raw", "arena.build.started.susraw", func(jetstream.Msg) { count(&rawN, rawDone) })
	wait := arenaConsume(ctx, b, bs, "sus-arena", "arena.build.started.susarena", func(*bus.Delivery) { count(&arenaN, arenaDone) })
	b.Cleanup(func() { cancel(); wait() })
	raw := newRawPublisher(b, bs.JetStream(), "susraw")
	pctx := context.Background()
	run := func(round int, publish func(id string, n int) error, done chan struct{}) float64 {
		t0 := time.Now()
		var wg sync.WaitGroup
		for p := range publishers {
			wg.Go(func() {
				for i := range perPublisher {
					if err := publish(fmt.Sprintf("r%d-p%d-%d", round, p, i), p*perPublisher+i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			b.Fatal("burst not handled")
		}
		return burst / time.Since(t0).Seconds()
	}
	pubRaw := func(id string, _ int) error { return raw.publish(pctx, "raw-"+id) }
	pubArena := func(id string, n int) error {
		_, err := bs.PublishNew(pctx, "arena-"+id, events.BuildStarted, events.Source("bench"), "susarena", startedData(n))
		return err
	}
	run(-1, pubRaw, rawDone) // warm up
	run(-1, pubArena, arenaDone)
	var rawR, arenaR []float64
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			rawR = append(rawR, run(i, pubRaw, rawDone))
			arenaR = append(arenaR, run(i, pubArena, arenaDone))
		} else {
			arenaR = append(arenaR, run(i, pubArena, arenaDone))
			rawR = append(rawR, run(i, pubRaw, rawDone))
		}
	}
	r, a := median(rawR), median(arenaR)
	b.ReportMetric(r, "raw-events/s")
	b.ReportMetric(a, "arena-events/s")
	b.ReportMetric(a/r, "ratio")
}

// startedData is a build.started payload that differs from every other
// of the process, as real payloads do, so that no publish finds its
// payload validated already.
func startedData(int) *events.StageStartedData {
	return &events.StageStartedData{SubmissionID: bustest.SampleSubject, Stage: "build", Attempt: int(attempts.Add(1))}
}

var attempts atomic.Int64

func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
