package bus_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/schemas"
)

func TestPublishConsumeRoundTrip(t *testing.T) {
	b, _ := bustest.Bus(t)
	rec := newRecorder()
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "roundtrip", Subjects: []string{events.FilterFor(events.SubmissionReceived)}},
		func(_ context.Context, d *bus.Delivery) bus.Outcome { rec.add(d); return bus.Ack() })

	sample := bustest.Sample(events.SubmissionReceived).(*events.SubmissionReceivedData)
	e, err := events.NewEvent("in-1", events.SubmissionReceived, events.Source("gateway"), bustest.SampleSubject, sample)
	require.NoError(t, err)
	e.SetExtension("partitionkey", "GPU 0 · é%")
	ack, err := b.Publish(tctx(t), e)
	require.NoError(t, err)
	require.Equal(t, events.StreamArena, ack.Stream)
	require.False(t, ack.Duplicate)

	d := rec.next(t)
	require.Equal(t, "arena.submission.received."+bustest.SampleSubject, d.Subject)
	require.Equal(t, uint64(1), d.NumDelivered)
	require.Equal(t, ack.Sequence, d.StreamSeq)
	require.Equal(t, e.ID(), d.Event.ID())
	require.Equal(t, e.Source(), d.Event.Source())
	require.Equal(t, e.Type(), d.Event.Type())
	require.Equal(t, e.Subject(), d.Event.Subject())
	require.True(t, e.Time().Equal(d.Event.Time()))
	require.Equal(t, "GPU 0 · é%", d.Event.Extensions()["partitionkey"], "percent-encoding survives the real wire")
	var got events.SubmissionReceivedData
	require.NoError(t, d.Decode(&got))
	require.Equal(t, *sample, got)

	require.Eventually(t, func() bool {
		return bustest.ConsumerInfo(t, b, events.StreamArena, "roundtrip").AckFloor.Stream == ack.Sequence
	},
		wait, 20*time.Millisecond, "the message is acked")
	require.Equal(t, 0, bustest.ConsumerInfo(t, b, events.StreamArena, "roundtrip").NumAckPending)
}

func TestRunnerJobsGoToTheWorkQueue(t *testing.T) {
	b, _ := bustest.Bus(t)
	ack := bustest.PublishSample(t, b, events.RunnerJobRequested, "job-1")
	require.Equal(t, events.StreamRunnerJobs, ack.Stream)
	msgs := bustest.StreamMsgs(t, b, events.StreamRunnerJobs)
	require.Len(t, msgs, 1)
	require.Equal(t, "jobs."+bustest.SampleJobKind+"."+bustest.SampleSubject, msgs[0].Subject)

	rec := newRecorder()
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "runner", Stream: events.StreamRunnerJobs, Prefetch: 1},
		func(_ context.Context, d *bus.Delivery) bus.Outcome { rec.add(d); return bus.Ack() })
	require.Equal(t, "job-1", rec.next(t).Event.ID())
	require.Eventually(t, func() bool { return len(bustest.StreamMsgs(t, b, events.StreamRunnerJobs)) == 0 },
		wait, 20*time.Millisecond, "an acked job leaves the work queue")
}

func TestPublishRefusesBadEvents(t *testing.T) {
	b, _ := bustest.Bus(t)
	good := func() any { return bustest.Sample(events.BuildStarted) }
	cases := []struct {
		name    string
		typ     events.Type
		subject string
		data    any
		want    error
		text    string
	}{
		{"unknown type", "dev.lowbarena.nope.v1", "s1", good(), bus.ErrUnknownType, ""},
		{"data failing its schema", events.BuildStarted, "s1", map[string]any{"submission_id": "s1"}, schemas.ErrInvalid, "attempt"},
		{"data of another type", events.BuildStarted, "s1", bustest.Sample(events.QualityStarted), schemas.ErrInvalid, "/stage"},
		{"too large", events.BuildFailed, "s1", &events.StageFailedData{SubmissionID: "s1", Stage: "build", Reason: "r",
			Message: strings.Repeat("x", bus.MaxEventBytes)}, bus.ErrTooLarge, ""},
		{"subject that is not a token", events.BuildStarted, "a.b", good(), nil, "not a valid subject token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.PublishNew(tctx(t), "id-"+tc.name, tc.typ, events.Source("test"), tc.subject, tc.data)
			require.Error(t, err)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			}
			require.ErrorContains(t, err, tc.text)
		})
	}
	require.Empty(t, bustest.StreamMsgs(t, b, events.StreamArena), "nothing refused was stored")
	require.Empty(t, bustest.StreamMsgs(t, b, events.StreamRunnerJobs))
}

func TestDuplicatePublishIsStoredOnce(t *testing.T) {
	b, _ := bustest.Bus(t)
	first := bustest.PublishSample(t, b, events.BuildStarted, "dup-1")
	require.False(t, first.Duplicate)
	again := bustest.PublishSample(t, b, events.BuildStarted, "dup-1")
	require.True(t, again.Duplicate)
	require.Equal(t, first.Sequence, again.Sequence)
	// Dedup is by id: a retry that rebuilt different data is still dropped.
	other, err := b.PublishNew(tctx(t), "dup-1", events.BuildStarted, events.Source("test"), bustest.SampleSubject,
		&events.StageStartedData{SubmissionID: bustest.SampleSubject, Stage: "build", Attempt: 2})
	require.NoError(t, err)
	require.True(t, other.Duplicate)
	third := bustest.PublishSample(t, b, events.BuildStarted, "dup-2")
	require.False(t, third.Duplicate)
	require.Len(t, bustest.StreamMsgs(t, b, events.StreamArena), 2)
}

func TestProvisionIsIdempotent(t *testing.T) {
	s := bustest.Server(t, "")
	b, err := bus.New(bustest.Connect(t, s))
	require.NoError(t, err)
	ctx := tctx(t)
	require.ErrorIs(t, bus.CheckProvisioned(ctx, b.JetStream()), bus.ErrNotProvisioned, "a bare server")

	require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{}))
	require.NoError(t, bus.CheckProvisioned(ctx, b.JetStream()))
	bustest.PublishSample(t, b, events.BuildStarted, "keep-me")
	before := streamConfigs(t, b)

	require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{}))
	require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{}))
	require.Equal(t, before, streamConfigs(t, b), "a second Provision changes nothing")
	require.Len(t, bustest.StreamMsgs(t, b, events.StreamArena), 1, "and keeps the messages")
	require.Len(t, before, 16, "3 streams, 11 KV buckets, 2 object stores")
	for _, name := range []string{events.StreamArena, events.StreamRunnerJobs, events.StreamDLQ,
		"KV_" + bus.BucketSubmissions, "KV_" + bus.BucketRounds, "KV_" + bus.BucketBundles, "KV_" + bus.BucketReferences, "KV_" + bus.BucketScoreInputs, "KV_" + bus.BucketParticipants, "KV_" + bus.BucketUsage, "KV_" + bus.BucketPods, "KV_" + bus.BucketCampaigns, "OBJ_" + bus.ObjectUploads, "OBJ_" + bus.ObjectArtifacts} {
		require.Contains(t, before, name)
	}
	require.Equal(t, 24*time.Hour, before[events.StreamArena].Duplicates)
	require.Equal(t, bus.DefaultPodsTTL, before["KV_"+bus.BucketPods].MaxAge, "a runner's entry lapses a TTL after its last heartbeat")
	require.Equal(t, int64(bus.CampaignsHistory), before["KV_"+bus.BucketCampaigns].MaxMsgsPerSubject, "the campaigns bucket keeps each task's versions")
}

// TestCheckStream: a service set for another cluster than the one it
// reaches (another replica count, an ARENA stream made by something
// else) is refused with stream_config_mismatch, and the stream is left
// as it was.
func TestCheckStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		// made is the ARENA stream found; nil: the arena's own, R1.
		made    *jetstream.StreamConfig
		service bus.Topology
		want    error
		detail  string
	}{
		{"the arena's stream", nil, bus.Topology{Replicas: 1}, nil, ""},
		{"a service set for R3 on a one-node arena", nil, bus.Topology{Replicas: 3}, bus.ErrStreamMismatch, "1 replicas, want 3"},
		{"another system's ARENA", &jetstream.StreamConfig{Name: events.StreamArena, Subjects: []string{"orders.>"}, Storage: jetstream.MemoryStorage},
			bus.Topology{Replicas: 1}, bus.ErrStreamMismatch, "subjects [orders.>]"},
		{"a work queue where the log should be", &jetstream.StreamConfig{Name: events.StreamArena, Subjects: []string{events.SubjectRootArena + ".>"},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}, bus.Topology{Replicas: 1}, bus.ErrStreamMismatch, "retention WorkQueue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := bustest.Server(t, "")
			b, err := bus.New(bustest.Connect(t, s))
			require.NoError(t, err)
			ctx := tctx(t)
			require.ErrorIs(t, bus.CheckStream(ctx, b.JetStream(), tc.service), bus.ErrNotProvisioned, "a bare server")
			if tc.made == nil {
				require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{}))
			} else {
				_, err := b.JetStream().CreateStream(ctx, *tc.made)
				require.NoError(t, err)
			}
			before := streamConfigs(t, b)[events.StreamArena]
			err = bus.CheckStream(ctx, b.JetStream(), tc.service)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, string(reason.StreamConfigMismatch))
			require.ErrorContains(t, err, tc.detail)
			require.Equal(t, before, streamConfigs(t, b)[events.StreamArena], "the stream is left as it was")
		})
	}
}

func streamConfigs(t *testing.T, b *bus.Bus) map[string]jetstream.StreamConfig {
	t.Helper()
	out := map[string]jetstream.StreamConfig{}
	l := b.JetStream().ListStreams(tctx(t))
	for info := range l.Info() {
		out[info.Config.Name] = info.Config
	}
	require.NoError(t, l.Err())
	return out
}

func TestTraceContextCrossesTwoHops(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b, _ := bustest.Bus(t, bus.WithTracerProvider(tp))

	// Hop 1: A consumes submission.received and publishes build.started
	// with the context it was handed.
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "a", Subjects: []string{events.FilterFor(events.SubmissionReceived)}},
		func(ctx context.Context, d *bus.Delivery) bus.Outcome {
			if _, err := b.PublishNew(ctx, events.DeriveID(d.Event.ID(), string(events.BuildStarted)), events.BuildStarted,
				events.Source("a"), d.Event.Subject(), bustest.Sample(events.BuildStarted)); err != nil {
				return bus.Retry(10*time.Millisecond, err)
			}
			return bus.Ack()
		})
	// Hop 2: B consumes build.started.
	got := make(chan trace.SpanContext, 1)
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "b", Subjects: []string{events.FilterFor(events.BuildStarted)}},
		func(ctx context.Context, _ *bus.Delivery) bus.Outcome {
			got <- trace.SpanContextFromContext(ctx)
			return bus.Ack()
		})

	ctx, root := tp.Tracer("test").Start(tctx(t), "root")
	_, err := b.PublishNew(ctx, "in-1", events.SubmissionReceived, events.Source("gateway"), bustest.SampleSubject,
		bustest.Sample(events.SubmissionReceived))
	require.NoError(t, err)
	root.End()
	var sc trace.SpanContext
	select {
	case sc = <-got:
	case <-time.After(wait):
		t.Fatal("B never ran")
	}
	require.True(t, sc.IsValid())
	require.Equal(t, root.SpanContext().TraceID(), sc.TraceID(), "B runs in the trace that published the first event")

	// The chain of spans: root -> publish received -> process received (A)
	// -> publish build.started -> process build.started (B).
	require.Eventually(t, func() bool { return len(spans.Ended()) >= 5 }, wait, 10*time.Millisecond)
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		require.Equal(t, root.SpanContext().TraceID(), s.SpanContext().TraceID(), s.Name())
		byName[s.Name()] = s
	}
	chain := []string{"root", "publish " + string(events.SubmissionReceived), "process " + string(events.SubmissionReceived),
		"publish " + string(events.BuildStarted), "process " + string(events.BuildStarted)}
	for i := 1; i < len(chain); i++ {
		child, parent := byName[chain[i]], byName[chain[i-1]]
		require.NotNil(t, child, chain[i])
		require.NotNil(t, parent, chain[i-1])
		require.Equal(t, parent.SpanContext().SpanID(), child.Parent().SpanID(), "%s is a child of %s", chain[i], chain[i-1])
	}
	require.Equal(t, trace.SpanKindProducer, byName[chain[1]].SpanKind())
	require.Equal(t, trace.SpanKindConsumer, byName[chain[4]].SpanKind())
	require.Equal(t, sc.SpanID(), byName[chain[4]].SpanContext().SpanID(), "B's handler context is its process span")
}

// rawHeader is a well-formed binary-mode header set for build.started.
func rawHeader(id string) nats.Header {
	return nats.Header{
		"ce-specversion": {"1.0"},
		"ce-id":          {id},
		"ce-source":      {"/lowbarena/test"},
		"ce-type":        {string(events.BuildStarted)},
		"ce-subject":     {bustest.SampleSubject},
		"Nats-Msg-Id":    {id},
	}
}

func TestBadInputIsDeadLetteredAtOnce(t *testing.T) {
	metrics := sdkmetric.NewManualReader()
	b, _ := bustest.Bus(t, bus.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
	rec := newRecorder()
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "guard", Subjects: []string{"arena.>"}, AckWait: 2 * time.Second},
		func(_ context.Context, d *bus.Delivery) bus.Outcome { rec.add(d); return bus.Ack() })

	goodData := `{"submission_id":"` + bustest.SampleSubject + `","stage":"build","attempt":1}`
	cases := []struct {
		name   string
		header func(id string) nats.Header
		data   string
		reason string
	}{
		{"not a CloudEvent", func(string) nats.Header { return nats.Header{} }, goodData, string(reason.MalformedEvent)},
		{"header that does not decode", func(id string) nats.Header {
			h := rawHeader(id)
			h.Set("ce-subject", "b0c4%zz")
			return h
		}, goodData, string(reason.MalformedEvent)},
		{"unsupported spec version", func(id string) nats.Header {
			h := rawHeader(id)
			h.Set("ce-specversion", "0.3")
			return h
		}, goodData, string(reason.MalformedEvent)},
		{"missing attribute", func(id string) nats.Header {
			h := rawHeader(id)
			h.Del("ce-source")
			return h
		}, goodData, string(reason.MissingAttribute)},
		{"unknown type", func(id string) nats.Header {
			h := rawHeader(id)
			h.Set("ce-type", "dev.lowbarena.nope.v1")
			return h
		}, goodData, string(reason.UnknownType)},
		{"data failing its schema", rawHeader, `{"submission_id":"x","stage":"score","attempt":0}`, string(reason.SchemaInvalid)},
		{"data that is not JSON", rawHeader, `{"submission_id":`, string(reason.SchemaInvalid)},
		{"oversized data", rawHeader, `{"pad":"` + strings.Repeat("x", bus.MaxEventBytes) + `"}`, string(reason.Oversized)},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tctx(t)
			before := counterBy(t, metrics, "lowbarena.events.dead_lettered", "reason")[tc.reason]
			badID := "bad-" + strconv.Itoa(i)
			msg := &nats.Msg{Subject: "arena.build.started." + badID, Header: tc.header(badID), Data: []byte(tc.data)}
			bad, err := b.JetStream().PublishMsg(ctx, msg)
			require.NoError(t, err)
			goodID := "good-" + strconv.Itoa(i)
			bustest.PublishSample(t, b, events.BuildStarted, goodID)

			d := rec.next(t)
			require.Equal(t, goodID, d.Event.ID(), "the handler never sees the bad message, and the good one after it is handled")

			var dead []string
			require.Eventually(t, func() bool {
				dead = dead[:0]
				for _, m := range bustest.StreamMsgs(t, b, events.StreamDLQ) {
					if m.Header.Get(bus.HeaderDLQSequence) == strconv.FormatUint(bad.Sequence, 10) {
						dead = append(dead, m.Header.Get(bus.HeaderDLQReason))
						require.Equal(t, "dlq.guard", m.Subject)
						require.Equal(t, "guard", m.Header.Get(bus.HeaderDLQConsumer))
						require.Equal(t, events.StreamArena, m.Header.Get(bus.HeaderDLQStream))
						require.Equal(t, msg.Subject, m.Header.Get(bus.HeaderDLQSubject))
						require.Equal(t, "1", m.Header.Get(bus.HeaderDLQDeliveries), "dead-lettered on the first delivery")
						require.NotEmpty(t, m.Header.Get(bus.HeaderDLQError))
						require.Equal(t, tc.data, string(m.Data), "the original data is kept")
						for k, vs := range msg.Header {
							if k != ce.HeaderMsgID {
								require.Equal(t, vs, m.Header[k], "original header %s is kept", k)
							}
						}
					}
				}
				return len(dead) > 0
			}, wait, 20*time.Millisecond)
			require.Equal(t, []string{tc.reason}, dead)
			require.Eventually(t, func() bool {
				return counterBy(t, metrics, "lowbarena.events.dead_lettered", "reason")[tc.reason] == before+1
			}, wait, 10*time.Millisecond, "dead_lettered{reason=%s} counts it", tc.reason)
		})
	}

	info := bustest.ConsumerInfo(t, b, events.StreamArena, "guard")
	require.Equal(t, 0, info.NumRedelivered, "nothing was redelivered: bad messages are Termed")
	require.Equal(t, 0, info.NumAckPending)
	require.Equal(t, uint64(2*len(cases)), info.Delivered.Consumer, "every message was delivered exactly once")
	require.Len(t, bustest.StreamMsgs(t, b, events.StreamDLQ), len(cases))
	require.Equal(t, len(cases), rec.count(), "only the good messages reached the handler")
	total := int64(0)
	for _, n := range counterBy(t, metrics, "lowbarena.events.dead_lettered", "reason") {
		total += n
	}
	require.Equal(t, int64(len(cases)), total)
	require.Equal(t, int64(len(cases)), counterBy(t, metrics, "lowbarena.events.consumed", "outcome")["dead_lettered"])
}

func TestRetryUntilMaxDeliverThenDeadLetter(t *testing.T) {
	metrics := sdkmetric.NewManualReader()
	b, _ := bustest.Bus(t, bus.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
	rec := newRecorder()
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "flaky", MaxDeliver: 3},
		func(_ context.Context, d *bus.Delivery) bus.Outcome {
			rec.add(d)
			return bus.Retry(10*time.Millisecond, errors.New("store unreachable (attempt "+strconv.FormatUint(d.NumDelivered, 10)+")"))
		})
	ack := bustest.PublishSample(t, b, events.BuildStarted, "flaky-1")
	for want := uint64(1); want <= 3; want++ {
		require.Equal(t, want, rec.next(t).NumDelivered)
	}
	require.Eventually(t, func() bool { return len(bustest.StreamMsgs(t, b, events.StreamDLQ)) == 1 }, wait, 20*time.Millisecond)
	m := bustest.StreamMsgs(t, b, events.StreamDLQ)[0]
	require.Equal(t, string(reason.MaxDeliverExceeded), m.Header.Get(bus.HeaderDLQReason))
	require.Contains(t, m.Header.Get(bus.HeaderDLQError), "store unreachable (attempt 3)", "the last error")
	require.Equal(t, "3", m.Header.Get(bus.HeaderDLQDeliveries))
	require.Equal(t, strconv.FormatUint(ack.Sequence, 10), m.Header.Get(bus.HeaderDLQSequence))
	require.Equal(t, "flaky-1", m.Header.Get(ce.HeaderID))
	// The copy is stored first, then counted (a copy that fails is not):
	// the count may trail the stream by a moment.
	require.Eventually(t, func() bool {
		return counterBy(t, metrics, "lowbarena.events.dead_lettered", "reason")[string(reason.MaxDeliverExceeded)] == 1
	}, wait, 10*time.Millisecond)
	require.Eventually(t, func() bool { return bustest.ConsumerInfo(t, b, events.StreamArena, "flaky").NumAckPending == 0 },
		wait, 20*time.Millisecond, "the message is settled (Termed)")
	require.Equal(t, 3, rec.count(), "no fourth delivery")
}

func TestPoisonIsDeadLetteredWithTheHandlersReason(t *testing.T) {
	metrics := sdkmetric.NewManualReader()
	b, _ := bustest.Bus(t, bus.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))))
	rec := newRecorder()
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "builder"},
		func(_ context.Context, d *bus.Delivery) bus.Outcome {
			rec.add(d)
			if d.Event.ID() == "poison-1" {
				return bus.Poison("bundle_unreadable", errors.New("tar: invalid header"))
			}
			return bus.Ack()
		})
	bustest.PublishSample(t, b, events.BuildStarted, "poison-1")
	bustest.PublishSample(t, b, events.BuildStarted, "after-1")
	require.Equal(t, "poison-1", rec.next(t).Event.ID())
	require.Equal(t, "after-1", rec.next(t).Event.ID())
	require.Eventually(t, func() bool { return len(bustest.StreamMsgs(t, b, events.StreamDLQ)) == 1 }, wait, 20*time.Millisecond)
	m := bustest.StreamMsgs(t, b, events.StreamDLQ)[0]
	require.Equal(t, "bundle_unreadable", m.Header.Get(bus.HeaderDLQReason))
	require.Equal(t, "tar: invalid header", m.Header.Get(bus.HeaderDLQError))
	require.Equal(t, "1", m.Header.Get(bus.HeaderDLQDeliveries))
	require.Equal(t, int64(1), counterBy(t, metrics, "lowbarena.events.dead_lettered", "reason")["bundle_unreadable"])
	require.Eventually(t, func() bool { return bustest.ConsumerInfo(t, b, events.StreamArena, "builder").NumAckPending == 0 }, wait, 20*time.Millisecond)
	require.Equal(t, 0, bustest.ConsumerInfo(t, b, events.StreamArena, "builder").NumRedelivered)
	require.Equal(t, 2, rec.count())
}

func TestPanicIsRetriedNotACrash(t *testing.T) {
	b, _ := bustest.Bus(t)
	rec := newRecorder()
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "panicky"},
		func(_ context.Context, d *bus.Delivery) bus.Outcome {
			rec.add(d)
			if d.Event.ID() == "panic-1" && d.NumDelivered == 1 {
				panic("nil map")
			}
			return bus.Ack()
		})
	bustest.PublishSample(t, b, events.BuildStarted, "panic-1")
	require.Equal(t, uint64(1), rec.next(t).NumDelivered)
	second := rec.next(t)
	require.Equal(t, uint64(2), second.NumDelivered)
	require.Equal(t, "panic-1", second.Event.ID())
	require.Eventually(t, func() bool { return bustest.ConsumerInfo(t, b, events.StreamArena, "panicky").NumAckPending == 0 }, wait, 20*time.Millisecond)
	require.Empty(t, bustest.StreamMsgs(t, b, events.StreamDLQ))
	// The consumer is still alive after the panic.
	bustest.PublishSample(t, b, events.BuildStarted, "panic-2")
	require.Equal(t, "panic-2", rec.next(t).Event.ID())
}

func TestHeartbeatsKeepLongWorkFromRedelivery(t *testing.T) {
	b, _ := bustest.Bus(t)
	const ackWait = 600 * time.Millisecond
	rec := newRecorder()
	// Prefetch above 1 keeps a pull open, so that the server would
	// redeliver into the buffer if the ack timer ran out.
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "gpu", AckWait: ackWait, Prefetch: 4},
		func(ctx context.Context, d *bus.Delivery) bus.Outcome {
			rec.add(d)
			select { // several AckWaits of work
			case <-time.After(4 * ackWait):
			case <-ctx.Done():
				return bus.Retry(0, ctx.Err())
			}
			return bus.Ack()
		})
	bustest.PublishSample(t, b, events.BuildStarted, "long-1")
	require.Equal(t, uint64(1), rec.next(t).NumDelivered)
	require.Eventually(t, func() bool { return bustest.ConsumerInfo(t, b, events.StreamArena, "gpu").AckFloor.Stream == 1 }, wait, 20*time.Millisecond)
	info := bustest.ConsumerInfo(t, b, events.StreamArena, "gpu")
	require.Equal(t, 0, info.NumRedelivered, "the ack timer never ran out")
	require.Equal(t, uint64(1), info.Delivered.Consumer, "delivered once")
	require.Equal(t, 1, rec.count())
}

// TestLongHandlerIsAcked: a handler that runs longer than the settling
// deadline still gets its ack through (the deadline starts when the
// handler returns), so a long GPU job is not redelivered and run twice.
func TestLongHandlerIsAcked(t *testing.T) {
	defer bus.SetAckTimeout(300 * time.Millisecond)()
	b, _ := bustest.Bus(t)
	rec := newRecorder()
	bustest.Consume(t, b, bus.ConsumerConfig{Name: "long", AckWait: 3 * time.Second, Prefetch: 1},
		func(_ context.Context, d *bus.Delivery) bus.Outcome {
			rec.add(d)
			time.Sleep(time.Second)
			return bus.Ack()
		})
	bustest.PublishSample(t, b, events.BuildStarted, "long-1")
	require.Equal(t, uint64(1), rec.next(t).NumDelivered)
	require.Eventually(t, func() bool {
		info := bustest.ConsumerInfo(t, b, events.StreamArena, "long")
		return info.NumAckPending == 0 && info.AckFloor.Consumer == 1
	}, wait, 20*time.Millisecond, "the ack went through")
	time.Sleep(3500 * time.Millisecond) // past AckWait: nothing comes back
	require.Equal(t, 1, rec.count(), "delivered once, not redelivered")
}

// TestAcksAreInWhenConsumeReturns: acks are sent without waiting for the
// server, and a consumer that stops flushes them: once Consume returns,
// the server holds every ack, even when the connection closes at once
// (asked from another connection),
// and nothing comes back after AckWait.
func TestAcksAreInWhenConsumeReturns(t *testing.T) {
	_, srv := bustest.Bus(t)
	nc := bustest.Connect(t, srv)
	b, err := bus.New(nc)
	require.NoError(t, err)
	other, err := bus.New(bustest.Connect(t, srv))
	require.NoError(t, err)
	const n = 200
	for i := range n {
		bustest.PublishSample(t, b, events.BuildStarted, "flush-"+strconv.Itoa(i))
	}
	cfg := bus.ConsumerConfig{Name: "flush", Subjects: []string{events.FilterFor(events.BuildStarted)}, AckWait: time.Second}
	var handled int
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- b.Consume(ctx, cfg, func(context.Context, *bus.Delivery) bus.Outcome {
			handled++
			if handled == n {
				cancel()
			}
			return bus.Ack()
		})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("Consume did not return")
	}
	require.Equal(t, n, handled)
	// The connection closes at once: the acks were flushed before Consume
	// returned, so none is lost with it. The server applies the acks it
	// received on its own queue, a moment later.
	nc.Close()
	require.Eventually(t, func() bool {
		info := bustest.ConsumerInfo(t, other, events.StreamArena, "flush")
		return info.NumAckPending == 0 && info.AckFloor.Stream == uint64(n)
	}, wait, 10*time.Millisecond, "every ack reached the server")
	// Past AckWait nothing is redelivered.
	rec := newRecorder()
	bustest.Consume(t, other, cfg, func(_ context.Context, d *bus.Delivery) bus.Outcome { rec.add(d); return bus.Ack() })
	time.Sleep(2 * cfg.AckWait)
	require.Equal(t, 0, rec.count())
}

// TestNextSettlesBeforeItReturns: Next acks without waiting too, and
// flushes: once it returns, the server holds the ack.
func TestNextSettlesBeforeItReturns(t *testing.T) {
	b, srv := bustest.Bus(t)
	other, err := bus.New(bustest.Connect(t, srv))
	require.NoError(t, err)
	cfg := bus.ConsumerConfig{Name: "step", Subjects: []string{events.FilterFor(events.BuildStarted)}}
	for i := range 20 {
		ack := bustest.PublishSample(t, b, events.BuildStarted, "step-"+strconv.Itoa(i))
		out, err := b.Next(tctx(t), cfg, wait, func(context.Context, *bus.Delivery) bus.Outcome { return bus.Ack() })
		require.NoError(t, err)
		require.True(t, out.IsAck())
		// The server holds the ack; it applies it on its own queue, a
		// moment later.
		require.Eventually(t, func() bool {
			info := bustest.ConsumerInfo(t, other, events.StreamArena, "step")
			return info.NumAckPending == 0 && info.AckFloor.Stream == ack.Sequence
		}, wait, 5*time.Millisecond)
	}
}
