//go:build embedded

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// syncBuffer is a log destination written by every service at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// One submission is one trace, across every hop it takes: `arena up`'s own
// wiring (embedded NATS, chDB, every service, a runner driving simengine
// as a process) runs with an in-memory span recorder, a participant
// uploads one example over the gateway's HTTP API, and once its record
// has settled the spans are read back and the chain checked: the upload's
// server span is the root, every span of the submission is in its trace,
// each process span is the child of the publish span of the very event it
// consumed, each publish happens inside the hop that caused it, and no
// span's parent is missing.
func TestUpTraceFollowsOneSubmission(t *testing.T) {
	// The runner finds simengine on PATH (TestMain built it beside the
	// arena binaries), as arena up finds it beside itself.
	t.Setenv("PATH", filepath.Dir(arenaBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	logs := &syncBuffer{}
	o := upOptions{data: t.TempDir(), natsListen: "127.0.0.1:0", httpAddr: "127.0.0.1:0", otel: "none", logLevel: "info", logFormat: "text",
		campaigns: filepath.Join(exampleDir, examples.CampaignsDir), runners: 1, pod: "pod-0", ackWait: 30 * time.Second,
		refHosts: hub.DefaultHost, tracer: tp}
	a, err := startArena(runCtx, o, logs)
	require.NoError(t, err)
	stopped := false
	stopArena := func() {
		if !stopped {
			stopped = true
			stop()
			require.NoError(t, a.wait())
		}
	}
	defer stopArena()
	defer func() {
		if t.Failed() {
			t.Logf("arena log (tail):\n%s", tailLines(logs.String(), 60))
		}
	}()

	c, err := a.dial(ctx)
	require.NoError(t, err)
	defer c.close()
	tok, err := ctl.CallWaiting[ctl.NewToken](ctx, c.nc, ctl.SubjectParticipantAdd,
		ctl.AddParticipant{Name: "example-team", Kind: participant.KindParticipant}, serviceWait)
	require.NoError(t, err)
	api, err := newAPIClient("http://"+a.httpAddr, tok.Token)
	require.NoError(t, err)
	p, err := prepare(bundleDir("fp8-w8a8"), defaultMaxUpload)
	require.NoError(t, err)
	defer p.close()
	id, err := api.submit(ctx, p, io.Discard)
	require.NoError(t, err)
	r, err := waitFor(ctx, c, id, 6*time.Minute, func(r *record.Submission) bool { return settled(r, a.stages) }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, record.StatusDone, string(stageOf(t, *r, "score").Status), "the example scores: every hop ran")
	// Draining the services ends every span in flight.
	stopArena()

	spans := rec.Ended()
	ch := chainOf(spans, id)
	require.NotNil(t, ch.root, "no server span of POST /v1/submissions names submission %s", id)
	require.Equal(t, "POST /v1/submissions", ch.root.Name())
	require.Equal(t, trace.SpanKindServer, ch.root.SpanKind())
	require.False(t, ch.root.Parent().IsValid(), "the upload's span is the root of the submission's trace")
	for _, problem := range ch.problems() {
		t.Error(problem)
	}

	// Every hop of the pipeline is in the trace: each event published,
	// and consumed by the consumers that take it.
	hops := []struct {
		typ       events.Type
		consumers []string
	}{
		{events.SubmissionReceived, []string{"build", "score"}},
		{events.BuildStarted, nil},
		{events.BuildCompleted, []string{"contract"}},
		{events.ContractStarted, nil},
		{events.ContractCompleted, []string{"quality", "efficiency", "score"}},
		{events.QualityStarted, nil},
		{events.QualityCompleted, []string{"score"}},
		{events.EfficiencyStarted, nil},
		{events.EfficiencyCompleted, []string{"score"}},
		{events.RunnerJobRequested, []string{"runner"}},
		{events.RunnerJobStarted, nil},
		{events.RunnerJobCompleted, []string{"quality-results", "efficiency-results"}},
		{events.ScoreCompleted, nil},
	}
	for _, h := range hops {
		require.NotEmpty(t, ch.published[string(h.typ)], "no publish span of %s in the trace", h.typ)
		for _, name := range h.consumers {
			require.Contains(t, ch.consumedBy[string(h.typ)], name, "consumer %s never processed %s in the trace", name, h.typ)
		}
		// The gateway folds every event of the submission into its record.
		if h.typ != events.RunnerJobRequested {
			require.NotEmpty(t, ch.consumedBy[string(h.typ)], "no consumer of %s in the trace", h.typ)
		}
	}
	// The runner's job spans say where the job ran; the stages' spans,
	// which stage and how it ended.
	for _, s := range ch.inTrace {
		attrs := attrMap(s.Attributes())
		if s.SpanKind() == trace.SpanKindConsumer && attrs["messaging.consumer.group.name"] == "runner" {
			require.Equal(t, "pod-0", attrs[string(bus.AttrPod)], "runner span %s", s.Name())
		}
		if s.SpanKind() == trace.SpanKindConsumer && attrs["messaging.consumer.group.name"] == "contract" && attrs[string(bus.AttrStageOutcome)] != "" {
			require.Equal(t, "contract", attrs[string(bus.AttrStage)])
			require.Equal(t, "completed", attrs[string(bus.AttrStageOutcome)])
			require.Equal(t, "ack", attrs[string(bus.AttrOutcome)])
		}
	}
	t.Logf("one trace: %d spans, %d events published, %d processed", len(ch.inTrace), ch.producers, ch.consumers)
}

// chain is what the spans say of one submission's trace.
type chain struct {
	id      string
	root    sdktrace.ReadOnlySpan
	inTrace []sdktrace.ReadOnlySpan
	// others are the spans that name the submission but are in another
	// trace: each one a broken hop.
	others []sdktrace.ReadOnlySpan
	// published maps an event type to its publish spans; consumedBy to
	// the consumers whose process span of it is in the trace.
	published  map[string][]sdktrace.ReadOnlySpan
	consumedBy map[string][]string
	byID       map[trace.SpanID]sdktrace.ReadOnlySpan
	// producers and consumers count the publish and process spans.
	producers, consumers int
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// chainOf sorts spans into the trace of submission id: the trace of the
// server span that names it.
func chainOf(spans []sdktrace.ReadOnlySpan, id string) *chain {
	c := &chain{id: id, published: map[string][]sdktrace.ReadOnlySpan{}, consumedBy: map[string][]string{}, byID: map[trace.SpanID]sdktrace.ReadOnlySpan{}}
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindServer && attrMap(s.Attributes())[string(bus.AttrSubmission)] == id {
			c.root = s
		}
	}
	if c.root == nil {
		return c
	}
	tid := c.root.SpanContext().TraceID()
	for _, s := range spans {
		attrs := attrMap(s.Attributes())
		if s.SpanContext().TraceID() != tid {
			if attrs[string(bus.AttrSubmission)] == id {
				c.others = append(c.others, s)
			}
			continue
		}
		c.inTrace = append(c.inTrace, s)
		c.byID[s.SpanContext().SpanID()] = s
		typ := attrs[string(bus.AttrEventType)]
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			c.producers++
			c.published[typ] = append(c.published[typ], s)
		case trace.SpanKindConsumer:
			c.consumers++
			c.consumedBy[typ] = append(c.consumedBy[typ], attrs["messaging.consumer.group.name"])
		}
	}
	return c
}

// problems lists every broken link of the chain: a span of the submission
// outside its trace, a span whose parent is not in the trace, a process
// span whose parent is not the publish span of the event it consumed, a
// publish span outside any hop.
func (c *chain) problems() []string {
	var out []string
	for _, s := range c.others {
		out = append(out, fmt.Sprintf("span %q (%s) names submission %s but is in trace %s, not the upload's %s",
			s.Name(), s.SpanKind(), c.id, s.SpanContext().TraceID(), c.root.SpanContext().TraceID()))
	}
	msgID := func(s sdktrace.ReadOnlySpan) string {
		return attrMap(s.Attributes())[string(semconv.MessagingMessageIDKey)]
	}
	for _, s := range c.inTrace {
		if s == c.root {
			continue
		}
		parent, ok := c.byID[s.Parent().SpanID()]
		if !ok {
			out = append(out, fmt.Sprintf("span %q (%s) is an orphan: its parent %s is not in the trace", s.Name(), s.SpanKind(), s.Parent().SpanID()))
			continue
		}
		switch s.SpanKind() {
		case trace.SpanKindConsumer:
			// The consumer's parent is the producer of the event it took.
			if parent.SpanKind() != trace.SpanKindProducer || msgID(parent) != msgID(s) {
				out = append(out, fmt.Sprintf("process span %q of event %s has parent %q (%s, event %s), not the event's publish span",
					s.Name(), msgID(s), parent.Name(), parent.SpanKind(), msgID(parent)))
			}
			if !s.Parent().IsRemote() {
				out = append(out, fmt.Sprintf("process span %q: its parent came in-process, not from the message's headers", s.Name()))
			}
		case trace.SpanKindProducer:
			// A publish happens within a hop: the upload or the
			// processing of the event that caused it.
			if parent.SpanKind() != trace.SpanKindConsumer && parent.SpanKind() != trace.SpanKindServer {
				out = append(out, fmt.Sprintf("publish span %q has parent %q (%s), not a hop's span", s.Name(), parent.Name(), parent.SpanKind()))
			}
		}
	}
	sort.Strings(out)
	if len(out) > 40 {
		out = append(out[:40], fmt.Sprintf("... and %d more", len(out)-40))
	}
	return out
}
