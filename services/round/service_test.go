package round_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
	_ "github.com/lowbarena/lowbarena/platform/store/chdb"
	"github.com/lowbarena/lowbarena/services/round"
)

var simengine, runnerBin string

// TestMain builds the simulated engine and the real runner, which the
// round tests start as a process of its own.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "round-bins-")
	if err != nil {
		panic(err)
	}
	simengine = filepath.Join(dir, "simengine")
	runnerBin = filepath.Join(dir, "runner")
	for bin, pkg := range map[string]string{simengine: "../../tools/simengine", runnerBin: "../runner/cmd/runner"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			panic(fmt.Sprintf("build %s: %v\n%s", pkg, err, out))
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type harness struct {
	t    *testing.T
	b    *bus.Bus
	url  string
	st   store.Store
	ctx  context.Context
	set  campaign.Set
	dir  string
	arts artifact.Store
	pod  string

	mu        sync.Mutex
	standings map[string]ctl.Standing
}

// setup runs NATS, a store and the score service's stand-in, with the
// example campaign served by simengine through a wrapper that crashes
// the engine of one checkpoint digest at start (none when crash is "").
func setup(t *testing.T, pod string, crash func(dir string) string, opts ...bus.Option) *harness {
	t.Helper()
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	set, err := campaign.LoadDir(filepath.Join(dir, examples.CampaignsDir))
	require.NoError(t, err)
	b, srv := bustest.Bus(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	dead := "none"
	if crash != nil {
		dead = crash(dir)
	}
	wrapper := filepath.Join(dir, "engine.sh")
	script := fmt.Sprintf("#!/bin/sh\ncase \"$2\" in */%s) exec %s \"$@\" --fault crash-on-start;; esac\nexec %s \"$@\"\n", dead, simengine, simengine)
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	c := set[examples.TaskID]
	c.Engine.Command = strings.Replace(c.Engine.Command, "simengine", wrapper, 1)
	c.Efficiency.WorkloadSpec = events.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 16, PromptWords: 32, LongPromptWords: 128}

	st, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	h := &harness{t: t, b: b, url: srv.ClientURL(), st: st, ctx: ctx, set: set, dir: dir, arts: arts, pod: pod, standings: map[string]ctl.Standing{}}
	h.scoreStandIn()
	return h
}

// scoreStandIn answers ctl.SubjectStanding as the score service would,
// from the standings the test prepares. The score service is another
// module; this micro service is the one stand-in of these tests.
func (h *harness) scoreStandIn() {
	svc, err := micro.AddService(h.b.Conn(), micro.Config{Name: ctl.ServiceScore, Version: "0.0.1"})
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = svc.Stop() })
	require.NoError(h.t, ctl.Endpoint(h.ctx, svc, "standing", ctl.SubjectStanding, 5*time.Second, func(_ context.Context, req ctl.StandingRequest) (ctl.Standing, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		st, ok := h.standings[req.SubmissionID]
		if !ok {
			return ctl.Standing{}, ctl.Refuse(ctl.CodeNotFound, "no submission %s", req.SubmissionID)
		}
		return st, nil
	}))
}

// runner starts the real runner on the harness's NATS as a process, and
// kills it (and its engines: its process group) at the end of the test.
func (h *harness) runner() {
	t := h.t
	logf, err := os.Create(filepath.Join(t.TempDir(), "runner.log"))
	require.NoError(t, err)
	cmd := exec.Command(runnerBin, "--nats", h.url, "--pod", h.pod, "--work", t.TempDir(), "--ack-wait", "5s", "--name", h.pod+"/runner-test")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			if out, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("runner log:\n%s", tail(string(out), 8000))
			}
		}
	})
	h.awaitRunner()
}

// awaitRunner waits until a live runner of the harness's pod is in the
// pods registry: a round starts only on a pod a live runner serves.
func (h *harness) awaitRunner() {
	h.t.Helper()
	kv, err := h.b.JetStream().KeyValue(h.ctx, bus.BucketPods)
	require.NoError(h.t, err)
	require.Eventually(h.t, func() bool {
		keys, err := kv.ListKeysFiltered(h.ctx, h.pod+".>")
		if err != nil {
			return false
		}
		defer func() { _ = keys.Stop() }()
		for range keys.Keys() {
			return true
		}
		return false
	}, time.Minute, 20*time.Millisecond, "the runner of pod %s registers", h.pod)
}

// register writes a runner's entry in the pods registry, as a live runner
// of pod serving kinds would, without a runner: the round's jobs then
// wait for none. It lapses with the bucket's TTL.
func (h *harness) register(pod, runner string, kinds ...string) {
	h.t.Helper()
	kv, err := h.b.JetStream().KeyValue(h.ctx, bus.BucketPods)
	require.NoError(h.t, err)
	now := time.Now().UTC()
	body, err := json.Marshal(events.PodEntry{Pod: pod, Runner: runner, GPU: "stand-in (simulated)", Simulated: true, Kinds: kinds, StartedAt: now, SeenAt: now})
	require.NoError(h.t, err)
	_, err = kv.Put(h.ctx, bus.Key(pod, runner), body)
	require.NoError(h.t, err)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// instance is one round service instance under its own context.
type instance struct {
	svc    *round.Service
	cancel context.CancelFunc
	done   chan struct{}
}

// stop cancels the instance's context and waits for its actors: what an
// abrupt stop leaves behind (nothing of the instance runs any more).
func (i *instance) stop() {
	i.cancel()
	<-i.done
}

func (h *harness) service(o round.Options) *instance {
	h.t.Helper()
	o.Campaigns, o.Store = h.set, h.st
	ctx, cancel := context.WithCancel(h.ctx)
	svc, err := round.New(ctx, h.b, slog.New(slog.NewTextHandler(io.Discard, nil)), o)
	require.NoError(h.t, err)
	in := &instance{svc: svc, cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, a := range svc.Actors() {
		wg.Go(func() { _ = a.Run(ctx) })
	}
	go func() { wg.Wait(); close(in.done) }()
	h.t.Cleanup(in.stop)
	// The micro endpoints answer once the service is registered.
	require.Eventually(h.t, func() bool {
		_, err := h.b.Conn().Request("$SRV.PING."+ctl.ServiceRound, nil, time.Second)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	return in
}

// submit stores a bundle's files as an artifact and prepares the standing
// the score service would give a submission that kept its contract (or
// not) and was scored.
func (h *harness) submit(id, bundleDir string, qualified, contractOK bool, memory float64) string {
	h.t.Helper()
	ref, err := artifact.PutDir(h.ctx, h.arts, bundleDir)
	require.NoError(h.t, err)
	drift := 0.5
	reason := "quality tier fail below B"
	ds := &record.Score{Qualified: qualified, Memory: &memory, Drift: &drift}
	if !qualified {
		ds.Reason = &reason
	}
	st := ctl.Standing{SubmissionID: id, Participant: "team-" + id, Split: "dev", Campaign: examples.TaskID, ContractKept: contractOK,
		KVCacheDType: "auto", Pending: []string{}}
	if contractOK {
		st.Artifact, st.BundleDigest, st.Score = &ref, ref.SHA256, ds
	} else {
		st.Failed = "contract_violation: it broke its contract"
	}
	h.mu.Lock()
	h.standings[id] = st
	h.mu.Unlock()
	return ref.SHA256
}

func (h *harness) bundle(name string) string {
	return filepath.Join(h.dir, examples.SubmissionsDir, name)
}

func (h *harness) start(req ctl.StartRequest) (ctl.StartReply, error) {
	ctx, cancel := context.WithTimeout(h.ctx, time.Minute)
	defer cancel()
	return ctl.Call[ctl.StartReply](ctx, h.b.Conn(), ctl.SubjectRoundStart, req)
}

// state reads a round's state and the pod's lease (nil when the pod is
// free) from the rounds bucket.
func (h *harness) state(id string) (round.Round, *round.Lease) {
	h.t.Helper()
	kv, err := h.b.JetStream().KeyValue(h.ctx, bus.BucketRounds)
	require.NoError(h.t, err)
	e, err := kv.Get(h.ctx, "round."+id)
	require.NoError(h.t, err)
	var r round.Round
	require.NoError(h.t, json.Unmarshal(e.Value(), &r))
	return r, h.lease()
}

func (h *harness) lease() *round.Lease {
	h.t.Helper()
	l, err := h.peekLease()
	require.NoError(h.t, err)
	return l
}

// peekLease reads the pod's lease without failing the test (for
// goroutines).
func (h *harness) peekLease() (*round.Lease, error) {
	kv, err := h.b.JetStream().KeyValue(h.ctx, bus.BucketRounds)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(h.ctx, "pod."+h.pod)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var l round.Lease
	if err := json.Unmarshal(e.Value(), &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// awaitEnd waits (a bound on the wait, not a speed assertion) for the
// round's end event.
func (h *harness) awaitEnd(id string) events.RoundCompletedData {
	h.t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		for _, e := range bustest.Stored(h.t, h.b, "arena.round.*."+id) {
			switch events.Type(e.Type()) {
			case events.RoundCompleted:
				res, err := events.Round.Completed.Decode(e)
				require.NoError(h.t, err)
				return res
			case events.RoundFailed:
				require.FailNow(h.t, "the round failed", "%s", e.Data())
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.FailNow(h.t, "the round did not end", "round %s", id)
	return events.RoundCompletedData{}
}

// steps returns the round's steps as their last non-running events say.
func (h *harness) steps(id string) map[int]events.RoundStepData {
	steps := map[int]events.RoundStepData{}
	for _, ev := range bustest.Stored(h.t, h.b, "arena.round.step."+id) {
		s, err := events.Round.Step.Decode(ev)
		require.NoError(h.t, err)
		if s.Status != events.StepRunning {
			steps[s.Step] = s
		}
	}
	return steps
}

func digestOf(t *testing.T, dir string) string {
	// The digest PutDir will give the bundle: the artifact manifest digest.
	var files []events.FileDigest
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files = append(files, events.FileDigest{Path: e.Name(), Size: int64(len(data)), SHA256: sha(data)})
	}
	return artifact.NewManifest(files).Digest
}

func sha(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

func refusal(t *testing.T, err error) *ctl.Error {
	t.Helper()
	var e *ctl.Error
	require.ErrorAs(t, err, &e)
	return e
}

func TestRoundOfFiveWithOneDeadEngine(t *testing.T) {
	h := setup(t, "pod-r", func(dir string) string {
		return digestOf(t, filepath.Join(dir, examples.SubmissionsDir, "nvfp4-w4a4"))
	})
	h.runner()
	h.service(round.Options{})
	h.submit("c1", h.bundle("fp8-w8a8"), true, true, 1.4)
	h.submit("c2", h.bundle("int4-w4a16-g32"), true, true, 1.66)
	h.submit("c3", h.bundle("nvfp4-w4a4"), true, true, 1.66) // its engine dies at start
	h.submit("c4", h.bundle("bf16-reference"), true, true, 1.0)
	h.submit("c5", h.bundle("int4-w4a16-g32"), false, true, 1.66) // tier fail: disqualified with its reason
	h.submit("broken", h.bundle("bf16-declared-w4"), false, false, 1)

	// Refusals, with their codes.
	for _, c := range []struct {
		req  ctl.StartRequest
		code string
		msg  string
	}{
		{ctl.StartRequest{Campaign: "nope", Candidates: []string{"c1"}}, ctl.CodeNotFound, "nope"},
		{ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "c2", "c3", "c4", "c5", "broken"}}, ctl.CodeBadRequest, "a round takes 1 to 5 candidates, not 6"},
		{ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "c1"}}, ctl.CodeBadRequest, "candidate c1 is named twice"},
		{ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "broken"}}, ctl.CodeBadRequest,
			"candidate broken: its contract has not been kept, so it cannot enter a round"},
		{ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"ghost"}}, ctl.CodeNotFound, "candidate ghost: the arena has no submission ghost"},
	} {
		_, err := h.start(c.req)
		e := refusal(t, err)
		require.Equal(t, c.code, e.Code, e.Message)
		require.Contains(t, e.Message, c.msg)
	}

	rep, err := h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "c2", "c3", "c4", "c5"}})
	require.NoError(t, err)
	require.Equal(t, 23, rep.Steps)
	id := rep.RoundID

	// A second round on the same pod is refused while the first runs.
	_, err = h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
	e := refusal(t, err)
	require.Equal(t, ctl.CodeConflict, e.Code)
	require.Contains(t, e.Message, "pod pod-r is running round "+id)

	res := h.awaitEnd(id)
	steps := h.steps(id)
	require.Len(t, steps, 23, "every step ends")
	for n, s := range steps {
		require.NotNil(t, s.StartedAt, "step %d", n)
		require.NotNil(t, s.FinishedAt, "step %d", n)
		require.False(t, s.FinishedAt.Before(*s.StartedAt), "step %d ends after it starts", n)
	}
	require.Equal(t, events.PhaseProvisioning, steps[1].Phase)
	require.Equal(t, events.PhaseTeardown, steps[23].Phase)
	require.Equal(t, events.StepSkipped, steps[7].Status, "no incumbent in a campaign's first round")
	require.Equal(t, "Drift baseline", steps[21].Group)

	status := map[string]events.RoundEntry{}
	for _, en := range res.Entries {
		status[en.EntryID] = en
	}
	require.Equal(t, "disqualified", status["c3"].Status)
	require.Contains(t, status["c3"].Reason, "engine_crashed")
	require.Contains(t, status["c3"].Reason, "container log tail")
	require.Equal(t, events.StepFailed, steps[13].Status, "c3's engine died before it was healthy")
	require.Equal(t, events.StepSkipped, steps[14].Status)
	require.Equal(t, "disqualified", status["c5"].Status)
	require.Equal(t, "quality tier fail below B", status["c5"].Reason)
	require.Equal(t, "scored", status["baseline"].Status)
	require.Equal(t, 0.0, *status["baseline"].Score, "0 is baseline speed")
	for _, c := range []string{"c1", "c2", "c4"} {
		require.Equal(t, "scored", status[c].Status, c)
	}
	// The 4-bit checkpoint leads: faster than BF16 in this round, and
	// smaller.
	require.Equal(t, "c2", res.Leader)
	require.True(t, res.LeaderChanged)
	require.Equal(t, *status["c2"].Score, *res.TopScore)
	require.Greater(t, *status["c2"].Score, *status["c4"].Score)
	require.NotNil(t, res.Drift)
	require.Greater(t, res.GPUHours, 0.0)

	type n struct {
		N uint64 `ch:"n"`
	}
	var rows []n
	require.NoError(t, h.st.Select(h.ctx, &rows, "SELECT count() AS n FROM round_steps FINAL WHERE round_id = ?", id))
	require.Equal(t, uint64(23), rows[0].N)

	// The round's result is listed for `arena history --rounds`.
	list, err := ctl.Call[ctl.ListReply](h.ctx, h.b.Conn(), ctl.SubjectRoundList, ctl.ListRequest{Campaign: examples.TaskID})
	require.NoError(t, err)
	require.Len(t, list.Rounds, 1)
	require.Equal(t, "complete", list.Rounds[0].Status)
	require.Equal(t, "c2", list.Rounds[0].Result.Leader)

	// The next round meets the leader as its incumbent, once the pod is
	// released.
	require.Eventually(t, func() bool {
		rep, err = h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
		return err == nil
	}, 20*time.Second, 100*time.Millisecond, "the pod is free again")
	started := bustest.Await(t, h.b, "arena.round.started."+rep.RoundID, events.RoundStarted)
	sd, err := events.Round.Started.Decode(started)
	require.NoError(t, err)
	require.Equal(t, "c2", sd.Incumbent)
}

// TestRoundWithoutRunnerEnds: no runner takes the round's jobs; each entry
// is disqualified at its deadline and the round ends instead of hanging.
func TestRoundWithoutRunnerEnds(t *testing.T) {
	h := setup(t, "lonely", nil)
	h.register(h.pod, "stand-in", events.JobSLA)
	h.service(round.Options{EntryTimeout: 500 * time.Millisecond, LeaseTTL: 1500 * time.Millisecond})
	h.submit("c1", h.bundle("fp8-w8a8"), true, true, 1.4)
	rep, err := h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
	require.NoError(t, err)
	res := h.awaitEnd(rep.RoundID)
	for _, en := range res.Entries {
		require.Equal(t, "disqualified", en.Status, en.EntryID)
		require.Contains(t, en.Reason, "round_job_timeout")
	}
	require.Nil(t, res.TopScore)
}

// TestRoundSurvivesAStop is issue 13's test: the round service stops
// abruptly while an entry's SLA job runs (its context is cancelled, so
// nothing of it runs any more and no clean-up path can), the round stays
// running in KV with its lease held; a new instance on the same NATS and
// runner takes the round over once the lease expires and the round
// completes; a new round on the same pod is then accepted and completes.
func TestRoundSurvivesAStop(t *testing.T) {
	h := setup(t, "pod-s", nil)
	h.runner()
	h.submit("c1", h.bundle("int4-w4a16-g32"), true, true, 1.66)
	ttl := 2 * time.Second
	first := h.service(round.Options{LeaseTTL: ttl})
	rep, err := h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
	require.NoError(t, err)
	require.Equal(t, 15, rep.Steps)
	id := rep.RoundID

	// Wait until an entry's SLA job is requested and not ended, then stop.
	require.Eventually(t, func() bool {
		r, _ := h.state(id)
		for _, e := range r.Entries {
			if e.Status == "running" && e.Role == "candidate" {
				return true
			}
		}
		return false
	}, 3*time.Minute, 10*time.Millisecond, "the candidate's job is requested")
	first.stop()

	r, lease := h.state(id)
	require.Equal(t, round.StatusRunning, r.Status, "a stop does not end the round")
	require.NotNil(t, lease, "a stop does not release the pod")
	require.Equal(t, id, lease.Round)
	require.Equal(t, first.svc.ID(), lease.Holder)
	require.Empty(t, bustest.Stored(t, h.b, "arena.round.failed."+id))

	// The next instance starts once the lease has expired (its holder is
	// gone): its first sweep takes the round over. Until the round ends
	// the lease names the new holder.
	time.Sleep(time.Until(lease.ExpiresAt))
	second := h.service(round.Options{LeaseTTL: ttl})
	require.NotEqual(t, first.svc.ID(), second.svc.ID())
	var takenOver atomic.Bool
	watch, stopWatch := context.WithCancel(h.ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watch.Err() == nil {
			if l, err := h.peekLease(); err == nil && l != nil && l.Round == id && l.Holder == second.svc.ID() {
				takenOver.Store(true)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	res := h.awaitEnd(id)
	stopWatch()
	<-watched
	require.True(t, takenOver.Load(), "the new instance holds the round's lease before it ends")
	status := map[string]events.RoundEntry{}
	for _, en := range res.Entries {
		status[en.EntryID] = en
	}
	require.Equal(t, "scored", status["baseline"].Status)
	require.Equal(t, "scored", status["c1"].Status, status["c1"].Reason)
	require.Equal(t, "c1", res.Leader)
	require.Len(t, h.steps(id), 15, "every step ends")
	r, lease = h.state(id)
	require.Equal(t, round.StatusComplete, r.Status)
	require.Nil(t, lease, "the pod is released at the end")
	require.Empty(t, r.Outbox, "every effect is carried out")

	// The round's three jobs were each queued once, the one requested
	// again on the take-over included.
	js, err := h.b.JetStream().Stream(h.ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	info, err := js.Info(h.ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.State.LastSeq)

	// The pod takes a new round, which completes.
	h.submit("c2", h.bundle("fp8-w8a8"), true, true, 1.4)
	rep, err = h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c2"}})
	require.NoError(t, err)
	res = h.awaitEnd(rep.RoundID)
	require.Equal(t, "c1", res.PreviousLeader, "the first round's leader is the incumbent")
	_, lease = h.state(rep.RoundID)
	require.Nil(t, lease)
}

// Neither a pod key that is not a lease (not JSON) nor an expired lease
// of a running round whose state is of another version blocks a new
// round: the key reads as expired, and that round ends as interrupted
// with the steps it reached.
func TestStalePodKeyDoesNotBlock(t *testing.T) {
	old := "round-0123456789abcdef"
	expired, err := json.Marshal(round.Lease{Round: old, Holder: "round-dead", ExpiresAt: time.Now().UTC().Add(-time.Minute)})
	require.NoError(t, err)
	for _, c := range []struct {
		name  string
		key   []byte
		state bool
	}{
		{"a value that is not a lease", []byte("not a lease"), false},
		{"an expired lease of a round of another version", expired, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := setup(t, "pod-old", nil)
			h.register(h.pod, "stand-in", events.JobSLA)
			kv, err := h.b.JetStream().KeyValue(h.ctx, bus.BucketRounds)
			require.NoError(t, err)
			_, err = kv.Put(h.ctx, "pod.pod-old", c.key)
			require.NoError(t, err)
			if c.state {
				// A state of no version this service resumes (none at
				// all), step 9 running.
				now := time.Now().UTC()
				var steps []events.RoundStepData
				for i := 1; i <= 23; i++ {
					st := events.RoundStepData{RoundID: old, Step: i, Of: 23, Group: "Setup", Name: fmt.Sprintf("step %d", i), Phase: events.PhaseProvisioning, Status: events.StepPending}
					switch {
					case i < 9:
						st.Status, st.StartedAt, st.FinishedAt = events.StepDone, &now, &now
					case i == 9:
						st.Status, st.StartedAt, st.Name = events.StepRunning, &now, "Candidate 2 of 5, running SLA"
					}
					steps = append(steps, st)
				}
				body, _ := json.Marshal(map[string]any{"round_id": old, "campaign": examples.TaskID, "pod": "pod-old", "status": "running",
					"started_at": now, "steps": steps, "entries": []map[string]any{{"entry_id": "baseline", "role": "baseline", "status": ""}}})
				_, err = kv.Put(h.ctx, "round."+old, body)
				require.NoError(t, err)
			}
			h.service(round.Options{})
			h.submit("c1", h.bundle("fp8-w8a8"), true, true, 1.4)
			rep, err := h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
			require.NoError(t, err)
			_, lease := h.state(rep.RoundID)
			require.NotNil(t, lease)
			require.Equal(t, rep.RoundID, lease.Round)
			if !c.state {
				return
			}
			e := bustest.Await(t, h.b, "arena.round.failed."+old, events.RoundFailed)
			f, err := events.Round.Failed.Decode(e)
			require.NoError(t, err)
			require.Equal(t, string(reason.Interrupted), f.Reason)
			require.Contains(t, f.Message, "reached step 9 of 23: Candidate 2 of 5, running SLA")
			list, err := ctl.Call[ctl.ListReply](h.ctx, h.b.Conn(), ctl.SubjectRoundList, ctl.ListRequest{})
			require.NoError(t, err)
			byID := map[string]ctl.Summary{}
			for _, s := range list.Rounds {
				byID[s.RoundID] = s
			}
			require.Equal(t, "failed", byID[old].Status)
			require.Equal(t, 9, byID[old].Reached)
			require.Equal(t, string(reason.Interrupted), byID[old].Reason)
			require.Equal(t, "running", byID[rep.RoundID].Status)
		})
	}
}

// A campaign whose reference folder holds no weights is refused with
// campaign_no_reference, and nothing is stored.
func TestRoundWithoutReference(t *testing.T) {
	h := setup(t, "pod-n", nil)
	h.register(h.pod, "stand-in", events.JobSLA)
	c := h.set[examples.TaskID]
	weights, err := filepath.Glob(filepath.Join(c.ReferenceDir(), "*.safetensors"))
	require.NoError(t, err)
	require.NotEmpty(t, weights)
	for _, w := range weights {
		require.NoError(t, os.Remove(w))
	}
	h.service(round.Options{})
	h.submit("c1", h.bundle("fp8-w8a8"), true, true, 1.4)
	objects := func() int {
		obs, err := h.b.JetStream().ObjectStore(h.ctx, bus.ObjectArtifacts)
		require.NoError(t, err)
		list, err := obs.List(h.ctx)
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			return 0
		}
		require.NoError(t, err)
		return len(list)
	}
	before := objects()
	_, err = h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
	e := refusal(t, err)
	require.Equal(t, ctl.CodeUnavailable, e.Code)
	require.Contains(t, e.Message, reason.CampaignNoReference)
	require.Equal(t, before, objects(), "nothing is stored")
	require.Nil(t, h.lease(), "the pod is not taken")
}

// TestRoundStoresThePatchedEngineSource starts a round whose candidate
// patches the engine: the round stores the campaign's pinned engine
// source (the same content-addressed tree the stages store) and keeps
// the candidate's patch on its entry, so its SLA job runs the engine
// its efficiency stage measured. A campaign that pins no source refuses
// such a candidate.
func TestRoundStoresThePatchedEngineSource(t *testing.T) {
	h := setup(t, "pod-e", nil)
	h.register(h.pod, "stand-in", events.JobSLA)
	h.service(round.Options{EntryTimeout: time.Minute})
	h.submit("c1", h.bundle("fp8-w8a8"), true, true, 1.4)
	h.submit("c2", h.bundle("int4-w4a16-g32"), true, true, 1.66)
	h.mu.Lock()
	st := h.standings["c1"]
	st.Patch = &record.Patch{Path: "engine.patch", SHA256: strings.Repeat("b", 64), EngineDigest: strings.Repeat("c", 64)}
	h.standings["c1"] = st
	h.mu.Unlock()

	c := h.set[examples.TaskID]
	require.NotEmpty(t, c.EngineSourceDir(), "the example campaign pins its engine source")
	want, err := artifact.PutTree(h.ctx, h.arts, c.EngineSourceDir())
	require.NoError(t, err)

	pinned := c.Engine.Source
	c.Engine.Source = nil
	_, err = h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "c2"}})
	e := refusal(t, err)
	require.Equal(t, ctl.CodeBadRequest, e.Code)
	require.Contains(t, e.Message, "c1 patches the engine, and campaign "+examples.TaskID+" pins no engine source")
	require.Nil(t, h.lease(), "the pod is not taken")
	c.Engine.Source = pinned

	rep, err := h.start(ctl.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "c2"}})
	require.NoError(t, err)
	r, _ := h.state(rep.RoundID)
	require.NotNil(t, r.EngineBundle)
	require.Equal(t, want.SHA256, r.EngineBundle.SHA256)
	patches := map[string]string{}
	for _, e := range r.Entries {
		patches[e.ID] = e.Patch
		if e.Patch != "" {
			require.Equal(t, strings.Repeat("c", 64), e.EngineDigest, "the tree its build checked")
		}
	}
	require.Equal(t, map[string]string{"baseline": "", "candidate-1": "engine.patch", "candidate-2": "", "drift_baseline": ""}, patches)
}
