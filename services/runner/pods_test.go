package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/podlease"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ce"
	"github.com/lowbarena/lowbarena/services/runner"
)

// runPod starts a runner of pod in this process (its real Run: the lease
// watch, the registry and both durables) and returns its stop.
func runPod(t *testing.T, ctx context.Context, b *bus.Bus, pod, name string, gpu int) func() {
	t.Helper()
	s, err := runner.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)),
		runner.Options{Pod: pod, Runner: name, GPU: gpu, WorkDir: t.TempDir(), AckWait: 3 * time.Second})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stop)
	return stop
}

// jobEvents follows the runner's job events in the ARENA stream with one
// ordered consumer (bustest.Await makes one per poll, which a long test
// would run out of).
type jobEvents struct {
	mu  sync.Mutex
	got map[string]map[events.Type][]byte
}

func followJobs(t *testing.T, ctx context.Context, b *bus.Bus) *jobEvents {
	t.Helper()
	j := &jobEvents{got: map[string]map[events.Type][]byte{}}
	c, err := b.JetStream().OrderedConsumer(ctx, events.StreamArena, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"arena.runner.job.>"}})
	require.NoError(t, err)
	cc, err := c.Consume(func(m jetstream.Msg) {
		e, err := ce.Decode(m.Headers(), m.Data())
		if err != nil {
			return
		}
		var d struct {
			JobID string `json:"job_id"`
		}
		_ = json.Unmarshal(e.Data(), &d)
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.got[d.JobID] == nil {
			j.got[d.JobID] = map[events.Type][]byte{}
		}
		j.got[d.JobID][events.Type(e.Type())] = e.Data()
		j.got[d.JobID][events.Type(e.Type())+"@"] = []byte(e.Time().Format(time.RFC3339Nano))
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	return j
}

// wait returns the data of job id's first event of one of types, waiting
// up to 30 s (a bound on the wait, not a speed assertion).
func (j *jobEvents) wait(t *testing.T, id string, types ...events.Type) []byte {
	t.Helper()
	var out []byte
	require.Eventually(t, func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, ty := range types {
			if d, ok := j.got[id][ty]; ok {
				out = d
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "no %v of job %s", types, id)
	return out
}

// end waits for job id's outcome (the sample job's checkpoint is not in
// the artifact store, so every runner fails it at once, naming its pod)
// and returns it.
func (j *jobEvents) end(t *testing.T, id string) events.RunnerJobFailedData {
	t.Helper()
	var d events.RunnerJobFailedData
	require.NoError(t, json.Unmarshal(j.wait(t, id, events.RunnerJobFailed, events.RunnerJobCompleted), &d))
	return d
}

// lease writes pod's lease for round, lapsing at exp.
func lease(t *testing.T, ctx context.Context, rounds jetstream.KeyValue, pod, round string, exp time.Time) {
	t.Helper()
	body, err := json.Marshal(podlease.Lease{Round: round, Holder: "test", ExpiresAt: exp})
	require.NoError(t, err)
	_, err = rounds.Put(ctx, podlease.Key(pod), body)
	require.NoError(t, err)
}

// entry reads a runner's entry in the pods registry (nil: none).
func entry(t *testing.T, ctx context.Context, pods jetstream.KeyValue, pod, name string) *events.PodEntry {
	t.Helper()
	e, err := pods.Get(ctx, runner.PodKey(pod, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	require.NoError(t, err)
	var out events.PodEntry
	require.NoError(t, json.Unmarshal(e.Value(), &out))
	return &out
}

// TestHeldPodTakesOnlyItsRoundsJobs: while a round's lease holds pod-a,
// every shared job goes to pod-b's runner and a job pinned to pod-a still
// runs on pod-a; with pod-b's runner gone, a shared job waits (pod-a's
// runner serves a pinned job queued after it, and leaves it queued) until
// the lease is released, then runs on pod-a. A lease whose holder stops
// renewing it lapses at its expiry with no write to its key, as the round
// service decides (podlease.Read), and the shared job queued meanwhile
// then runs on pod-a.
func TestHeldPodTakesOnlyItsRoundsJobs(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rounds, err := b.JetStream().KeyValue(ctx, bus.BucketRounds)
	require.NoError(t, err)
	pods, err := b.JetStream().KeyValue(ctx, bus.BucketPods)
	require.NoError(t, err)

	jobs := followJobs(t, ctx, b)
	lease(t, ctx, rounds, "pod-a", "round-x", time.Now().Add(time.Hour))
	runPod(t, ctx, b, "pod-a", "a0", 0)
	stopB := runPod(t, ctx, b, "pod-b", "b0", 0)
	require.Eventually(t, func() bool {
		e := entry(t, ctx, pods, "pod-a", "a0")
		return e != nil && e.HeldBy == "round-x"
	}, 30*time.Second, 20*time.Millisecond, "pod-a's runner sees the lease")

	for i := range 4 {
		publishJob(t, ctx, b, fmt.Sprintf("s%d", i), "")
	}
	publishJob(t, ctx, b, "p1", "pod-a")
	for i := range 4 {
		require.Equal(t, "pod-b", jobs.end(t, fmt.Sprintf("s%d", i)).Pod, "shared job s%d on the unheld pod", i)
	}
	require.Equal(t, "pod-a", jobs.end(t, "p1").Pod, "the round's pinned job on its pod")

	// Only pod-a's runner: the shared job waits behind the lease.
	stopB()
	require.Nil(t, entry(t, ctx, pods, "pod-b", "b0"), "a runner that stops deletes its entry")
	publishJob(t, ctx, b, "s-wait", "")
	publishJob(t, ctx, b, "p2", "pod-a")
	require.Equal(t, "pod-a", jobs.end(t, "p2").Pod)
	shared, err := b.JetStream().Consumer(ctx, events.StreamRunnerJobs, runner.Name)
	require.NoError(t, err)
	info, err := shared.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.NumPending, "the shared job is still queued after pod-a served a later pinned one")
	require.Zero(t, info.NumAckPending, "nobody holds it")

	require.NoError(t, rounds.Delete(ctx, podlease.Key("pod-a")), "the round ends: its lease is released")
	require.Equal(t, "pod-a", jobs.end(t, "s-wait").Pod, "released: pod-a takes shared work again")

	// A holder that dies: its lease is never written again and lapses.
	exp := time.Now().Add(3 * time.Second)
	lease(t, ctx, rounds, "pod-a", "round-y", exp)
	require.Eventually(t, func() bool {
		e := entry(t, ctx, pods, "pod-a", "a0")
		return e != nil && e.HeldBy == "round-y"
	}, 30*time.Second, 20*time.Millisecond, "pod-a's runner sees the new lease")
	publishJob(t, ctx, b, "s-lapse", "")
	require.Eventually(t, func() bool { return entry(t, ctx, pods, "pod-a", "a0").HeldBy == "" }, 30*time.Second, 50*time.Millisecond,
		"the lease lapses at its expiry with no write to its key")
	require.Equal(t, "pod-a", jobs.end(t, "s-lapse").Pod)
	at, err := time.Parse(time.RFC3339Nano, string(jobs.wait(t, "s-lapse", events.RunnerJobFailed+"@")))
	require.NoError(t, err)
	require.False(t, at.Before(exp), "the shared job ran once the lease had lapsed, not before (ended %s, lapse %s)", at, exp)
}

// TestPodRegistryEntryLapses: a runner's entry in the pods registry names
// its pod, GPU index and name (simulated, as simulated) and kinds, and
// is rewritten while the runner lives; a runner that dies without deleting its entry
// (here: its heartbeat stops with a bucket TTL of 2 s) disappears from
// the registry after the TTL.
func TestPodRegistryEntryLapses(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, bus.Provision(ctx, b.JetStream(), bus.Topology{PodsTTL: 2 * time.Second}))
	pods, err := b.JetStream().KeyValue(ctx, bus.BucketPods)
	require.NoError(t, err)
	st, err := pods.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, st.TTL())

	for _, c := range []struct {
		name string
		gpu  int
	}{{"g0", 0}, {"g1", 1}} {
		runPod(t, ctx, b, "pod-c", c.name, c.gpu)
	}
	for _, c := range []struct {
		name string
		gpu  int
	}{{"g0", 0}, {"g1", 1}} {
		var e *events.PodEntry
		require.Eventually(t, func() bool { e = entry(t, ctx, pods, "pod-c", c.name); return e != nil }, 30*time.Second, 20*time.Millisecond)
		require.Equal(t, "pod-c", e.Pod)
		require.Equal(t, c.name, e.Runner)
		require.Equal(t, c.gpu, e.GPUIndex)
		require.True(t, e.Simulated)
		require.Contains(t, e.GPU, "simulated")
		require.Contains(t, e.Kinds, events.JobEfficiency)
		require.Nil(t, e.Job)
		require.Empty(t, e.HeldBy)
	}
	// The heartbeat keeps a live entry past several TTLs: it is there
	// after three more writes.
	first := entry(t, ctx, pods, "pod-c", "g0").SeenAt
	require.Eventually(t, func() bool {
		e := entry(t, ctx, pods, "pod-c", "g0")
		return e != nil && e.SeenAt.After(first.Add(5*time.Second))
	}, 30*time.Second, 50*time.Millisecond, "a live runner's entry outlives the TTL")

	// A runner that died: its last entry, written by hand as it would
	// have, is never renewed.
	dead := events.PodEntry{Pod: "pod-d", Runner: "d0", GPU: "simulated (no NVML)", Simulated: true, SeenAt: time.Now().UTC(),
		Job: &events.PodJob{JobID: "j1", Kind: events.JobEfficiency, Since: time.Now().UTC(), Delivery: 1}}
	body, err := json.Marshal(dead)
	require.NoError(t, err)
	_, err = pods.Put(ctx, runner.PodKey("pod-d", "d0"), body)
	require.NoError(t, err)
	require.NotNil(t, entry(t, ctx, pods, "pod-d", "d0"))
	require.Eventually(t, func() bool { return entry(t, ctx, pods, "pod-d", "d0") == nil }, 30*time.Second, 50*time.Millisecond,
		"an entry nobody renews lapses after the bucket's TTL")
	require.NotNil(t, entry(t, ctx, pods, "pod-c", "g0"), "the live runners' entries stay")
}

// TestPodRegistryNamesTheRunningJob: while a runner runs a job (here an
// efficiency job whose engine never becomes healthy), its entry names
// the job, its kind, submission and delivery; when the runner stops, the
// job goes back to the queue and the entry is deleted.
func TestPodRegistryNamesTheRunningJob(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := b.JetStream().KeyValue(ctx, bus.BucketPods)
	require.NoError(t, err)
	// The runner's own context has no deadline, as in production: a
	// read of the object store started before the stop ignores the
	// cancellation until its read deadline, the context's deadline when
	// it has one (nats.go's objResult.Read), else 5 s.
	stop := runPod(t, context.Background(), b, "pod-e", "e0", 2)
	ref := putCheckpoint(t, ctx, b, "BF16", 1<<20)
	cand := putCheckpoint(t, ctx, b, "U8", 1<<20)
	request(t, ctx, b, "busy1", cand, ref, "sleep 600", small())

	var e *events.PodEntry
	require.Eventually(t, func() bool {
		e = entry(t, ctx, pods, "pod-e", "e0")
		return e != nil && e.Job != nil
	}, 30*time.Second, 20*time.Millisecond, "the entry names the job it runs")
	require.Equal(t, events.PodJob{JobID: "busy1", Kind: events.JobEfficiency, SubmissionID: "sub-busy1", Since: e.Job.Since, Delivery: 1}, *e.Job)
	require.False(t, e.Job.Since.IsZero())
	require.Equal(t, 2, e.GPUIndex)

	stop()
	require.Nil(t, entry(t, ctx, pods, "pod-e", "e0"), "a runner that stops deletes its entry")
	shared, err := b.JetStream().Consumer(ctx, events.StreamRunnerJobs, runner.Name)
	require.NoError(t, err)
	info, err := shared.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.NumPending+uint64(info.NumAckPending)+uint64(info.NumRedelivered), "the job is back on the queue, not lost: %+v", info)
}
