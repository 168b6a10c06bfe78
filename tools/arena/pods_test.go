package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/podlease"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/services/runner"
)

// samples are gpu_samples rows of one engine run, as a runner writes
// them: run <job>-<delivery>/<engine run>, one every 500 ms from fromMs
// to toMs.
func samples(pod string, gpu uint32, job string, delivery int, engineRun string, fromMs, toMs uint64) []store.GPUSample {
	var out []store.GPUSample
	run := job + "-" + strconv.Itoa(delivery) + "/" + engineRun
	seq := uint64(0)
	for ts := fromMs; ts <= toMs; ts += 500 {
		seq++
		out = append(out, store.GPUSample{TsMs: ts, Pod: pod, GPU: gpu, RunID: run, JobID: job, Seq: seq, MemUsed: 1 << 30, MemTotal: 141 << 30, Simulated: 1})
	}
	return out
}

// TestPodsListsRunnersLeasesAndGPUHours runs `arena pods` against real
// parts: NATS with the arena's buckets, three runners (pod-a GPU 0, pod-b
// GPUs 0 and 1) running their real loop, a round's lease on pod-a (and a
// lapsed one on pod-c, a pod that holds nothing), and the query service
// over a ClickHouse server holding gpu_samples as runners write them: a
// job with two engine runs, a job whose id has dashes, and a job
// redelivered from pod-b's GPU 1 (its runner died after 7 s) to GPU 0
// (9 s), with its last batch written twice. The GPU-hours are derived
// here by hand: each job counts once, its last delivery's engine runs.
func TestPodsListsRunnersLeasesAndGPUHours(t *testing.T) {
	url, st, b := liveQueryService(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js := b.JetStream()
	rounds, err := js.KeyValue(ctx, bus.BucketRounds)
	require.NoError(t, err)
	putLease := func(pod, round string, exp time.Time) {
		body, err := json.Marshal(podlease.Lease{Round: round, Holder: "round-svc", ExpiresAt: exp})
		require.NoError(t, err)
		_, err = rounds.Put(ctx, podlease.Key(pod), body)
		require.NoError(t, err)
	}
	putLease("pod-a", "round-0123456789abcdef", time.Now().Add(time.Hour))
	putLease("pod-c", "round-fedcba9876543210", time.Now().Add(-time.Minute))

	for _, r := range []struct {
		pod, name string
		gpu       int
	}{{"pod-a", "a0", 0}, {"pod-b", "b0", 0}, {"pod-b", "b1", 1}} {
		s, err := runner.New(ctx, b, quietLog(), runner.Options{Pod: r.pod, Runner: r.name, GPU: r.gpu, WorkDir: t.TempDir()})
		require.NoError(t, err)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx) }()
		t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	}

	var rows []store.GPUSample
	rows = append(rows, samples("pod-a", 0, "j1", 1, "reference", 1000, 3000)...)    // 2 s
	rows = append(rows, samples("pod-a", 0, "j1", 1, "candidate", 10000, 13000)...)  // 3 s
	rows = append(rows, samples("pod-a", 0, "sla-r-1-base", 1, "serve", 0, 3500)...) // 3.5 s
	rows = append(rows, samples("pod-b", 1, "j2", 1, "candidate", 0, 7000)...)       // the dead attempt
	last := samples("pod-b", 0, "j2", 2, "candidate", 20000, 29000)                  // 9 s
	rows = append(rows, last...)
	rows = append(rows, last[len(last)-4:]...) // a batch written twice
	require.NoError(t, store.Insert(ctx, st, rows))

	pods, err := js.KeyValue(ctx, bus.BucketPods)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		l, err := pods.ListKeys(ctx)
		if err != nil {
			return false
		}
		n := 0
		for range l.Keys() {
			n++
		}
		return n == 3
	}, 30*time.Second, 50*time.Millisecond, "the three runners are in the registry")

	var out, errs bytes.Buffer
	require.NoError(t, run(ctx, []string{"pods", "--json", "--nats", url}, &out, &errs), errs.String())
	var v ctl.PodsView
	require.NoError(t, json.Unmarshal(out.Bytes(), &v), out.String())
	require.Empty(t, v.GPUHoursError)
	require.Len(t, v.Pods, 2, "pod-c's lapsed lease holds nothing and it has no runner: %s", out.String())

	a, bp := v.Pods[0], v.Pods[1]
	require.Equal(t, "pod-a", a.Pod)
	require.Equal(t, "round-0123456789abcdef", a.HeldBy)
	require.Len(t, a.Runners, 1)
	require.Equal(t, "a0", a.Runners[0].Runner)
	require.Equal(t, "round-0123456789abcdef", a.Runners[0].HeldBy, "the runner saw its pod's lease")
	require.True(t, a.Runners[0].Simulated)
	require.Nil(t, a.Runners[0].Job)
	require.Equal(t, 2, a.Jobs)
	require.NotNil(t, a.GPUHours)
	require.InDelta(t, (2+3+3.5)/3600.0, *a.GPUHours, 1e-6)

	require.Equal(t, "pod-b", bp.Pod)
	require.Empty(t, bp.HeldBy)
	require.Len(t, bp.Runners, 2)
	require.Equal(t, []string{"b0", "b1"}, []string{bp.Runners[0].Runner, bp.Runners[1].Runner})
	require.Equal(t, []int{0, 1}, []int{bp.Runners[0].GPUIndex, bp.Runners[1].GPUIndex})
	require.Equal(t, 1, bp.Jobs, "the redelivered job counts once")
	require.InDelta(t, 9/3600.0, *bp.GPUHours, 1e-6, "its last delivery's time only")
	require.Equal(t, []ctl.GPUHours{{GPU: 0, Jobs: 1, GPUHours: ctl.RoundHours(9 / 3600.0), Simulated: true}}, bp.GPUs, "on GPU 0, where it ended")

	out.Reset()
	require.NoError(t, run(ctx, []string{"pods", "--nats", url}, &out, &errs), errs.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 6, out.String())
	require.Equal(t, []string{"POD", "GPU", "DEVICE", "RUNNER", "NOW", "HELD", "BY", "GPU-HOURS", "JOBS", "KINDS"}, strings.Fields(lines[0]))
	kinds := strings.Join(a.Runners[0].Kinds, ",")
	require.Contains(t, a.Runners[0].Kinds, events.JobSLA, "a runner serves the rounds' jobs by default")
	require.True(t, a.TakesRounds)
	require.True(t, bp.TakesRounds)
	for i, want := range [][]string{
		{"pod-a", "0", "a0", "idle", "round-0123456789abcdef", "0.002361", "2", kinds},
		{"pod-b", "0", "b0", "idle", "-", "0.002500", "1", kinds},
		{"pod-b", "1", "b1", "idle", "-", "0", "0", kinds},
	} {
		f := strings.Fields(lines[i+1])
		// The device's name has spaces: compare around it.
		got := append(append([]string{}, f[:2]...), f[len(f)-6:]...)
		require.Equal(t, want, got, lines[i+1])
		require.Contains(t, lines[i+1], "simulated")
	}
	require.Equal(t, "(2 pods, 3 runners)", lines[4])
	require.Contains(t, lines[5], "pod-a (held by round-0123456789abcdef), pod-b (free)", "which pods a round may name")
}

// TestRunnerPodsUnderItsPermissions runs a runner as the runner's NATS
// user of the permission table, on a server that enforces it: it
// watches its pod's lease in the rounds bucket (it sees the round), writes
// its entry in the pods registry, and deletes it when it stops; the
// operator reads both.
func TestRunnerPodsUnderItsPermissions(t *testing.T) {
	a := natsArena(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := a.busAs(t, access.Operator).JetStream()
	// The lease as the round service writes it, with its user.
	rounds, err := a.busAs(t, access.Round).JetStream().KeyValue(ctx, bus.BucketRounds)
	require.NoError(t, err)
	body, err := json.Marshal(podlease.Lease{Round: "round-0123456789abcdef", Holder: "round-svc", ExpiresAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = rounds.Put(ctx, podlease.Key("pod-a"), body)
	require.NoError(t, err)

	s, err := runner.New(ctx, a.busAs(t, access.Runner), quietLog(), runner.Options{Pod: "pod-a", Runner: "a1", GPU: 1, WorkDir: t.TempDir()})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()

	pods, err := op.KeyValue(ctx, bus.BucketPods)
	require.NoError(t, err)
	key := runner.PodKey("pod-a", "a1")
	require.Eventually(t, func() bool {
		e, err := pods.Get(ctx, key)
		if err != nil {
			return false
		}
		var pe events.PodEntry
		return json.Unmarshal(e.Value(), &pe) == nil && pe.HeldBy == "round-0123456789abcdef" && pe.GPUIndex == 1
	}, 30*time.Second, 50*time.Millisecond, "the runner's entry, with the round it read")

	// `arena pods` as the operator: the registry and the leases; no
	// query service runs here, so it says why the hours are missing.
	for _, k := range []string{app.EnvNATSNkey, app.EnvNATSUser, app.EnvNATSPassword, app.EnvNATSPasswordFile} {
		t.Setenv(k, "")
	}
	t.Setenv(app.EnvNATSCreds, a.creds.SeedFile(access.Operator))
	serviceWait = 200 * time.Millisecond
	t.Cleanup(func() { serviceWait = 5 * time.Second })
	var out, errs bytes.Buffer
	require.NoError(t, run(ctx, []string{"pods", "--json", "--nats", a.url}, &out, &errs), errs.String())
	var v ctl.PodsView
	require.NoError(t, json.Unmarshal(out.Bytes(), &v), out.String())
	require.Len(t, v.Pods, 1)
	require.Equal(t, "round-0123456789abcdef", v.Pods[0].HeldBy)
	require.Len(t, v.Pods[0].Runners, 1)
	require.Nil(t, v.Pods[0].GPUHours)
	require.Contains(t, v.GPUHoursError, "no query service answers")
	require.Contains(t, errs.String(), "no GPU-hours")

	stop()
	require.NoError(t, <-done, "no permission was refused")
	_, err = pods.Get(ctx, key)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "a runner that stops deletes its entry")
}
