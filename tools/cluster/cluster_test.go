package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
)

// bins are the binaries TestMain built; examples the folder `arena
// example` wrote; root the repository's root.
var (
	bins           Binaries
	examples, root string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cluster-bin-")
	if err != nil {
		panic(err)
	}
	if root, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
		panic(err)
	}
	if bins, err = Build(context.Background(), root, dir); err != nil {
		panic(err)
	}
	examples = filepath.Join(dir, "examples")
	c := &Cluster{Options: Options{Bin: bins}}
	if _, err := c.Arena(context.Background(), "example", examples); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Environment of TestCluster: `make test` runs it with the defaults,
// `make chaos` with large counts.
const (
	// EnvKills is how many times services are killed (default 20).
	EnvKills = "LOWBARENA_CLUSTER_KILLS"
	// EnvSeed seeds the choice of services and moments (default: the
	// clock; the test logs it, so a run can be replayed).
	EnvSeed = "LOWBARENA_CLUSTER_SEED"
	// EnvReport names a file the fault table is written to.
	EnvReport = "LOWBARENA_CLUSTER_REPORT"
)

// wave is what the test submits: bundles whose GPU stages run, and
// dishonest ones the contract refuses, each with the outcome a healthy
// arena gives it.
var wave = []struct{ bundle, refused string }{
	{"fp8-w8a8", ""},
	{"int4-w4a16-g32", ""},
	{"bf16-declared-w4", "precision_wider_than_declared"},
	{"rope-theta-changed", "rope_changed"},
}

// healthy says whether rec ended as a healthy arena ends its bundle: a
// refusal at the contract with its reason, else every stage done (the
// score stage done or skipped: dev submissions are not ranked).
func healthy(rec record.Submission, refused string) string {
	if refused != "" {
		if rec.Status != record.StatusFailed || rec.Error == nil || rec.Error.Code != refused || rec.Error.Stage != "contract" {
			return fmt.Sprintf("want refused at the contract with %s, got %s %+v", refused, rec.Status, rec.Error)
		}
		return ""
	}
	if rec.Status != record.StatusDone {
		return fmt.Sprintf("want done, got %s %+v", rec.Status, rec.Error)
	}
	for _, st := range rec.Stages {
		if st.Status != record.StatusDone && !(st.Name == "score" && st.Status == record.StatusSkipped) {
			return fmt.Sprintf("stage %s %s", st.Name, st.Status)
		}
	}
	return ""
}

func envInt(t *testing.T, key string, def int64) int64 {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, key)
	return n
}

// TestCluster runs the arena as a cluster (three NATS nodes, a ClickHouse
// server, every service its own process, a runner on each of two pods),
// submits the examples and, while their stages run, kills services with
// SIGKILL mid-stage, kills the node that leads the ARENA stream and then
// the meta leader, stops ClickHouse for 30 s and kills a runner mid-job.
// Every submission must end as a healthy arena ends it, nothing be
// published twice or dead-lettered, nothing published before a node's
// death be lost, every row the log calls for be in the store once. Then
// a round runs on the first pod. It asserts counts, never times.
func TestCluster(t *testing.T) { //nolint:gocyclo // a scenario: the faults in the order they are injected, each with its checks, read as one script
	if testing.Short() {
		t.Skip("the cluster takes minutes")
	}
	nKills := int(envInt(t, EnvKills, 20))
	seed := envInt(t, EnvSeed, time.Now().UnixNano())
	t.Logf("%s=%d %s=%d", EnvKills, nKills, EnvSeed, seed)
	budget := 9*time.Minute + time.Duration(nKills)*12*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()

	// The cluster's folder (logs, data) stays after a failure, for the
	// post-mortem.
	dir, err := os.MkdirTemp("", "cluster-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster's logs and data are in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	c, err := Start(ctx, Options{Root: root, Dir: dir, Bin: bins, Campaigns: filepath.Join(examples, "campaigns"),
		RunnerAckWait: 10 * time.Second})
	require.NoError(t, err)
	defer c.Close()

	var mu sync.Mutex
	subs := map[string]string{} // submission id → bundle
	submit := func(bundle string) {
		out, err := c.Arena(ctx, "submit", filepath.Join(examples, "submissions", bundle))
		if err != nil {
			t.Errorf("submit %s: %v", bundle, err)
			return
		}
		mu.Lock()
		subs[lastWord(out)] = bundle
		mu.Unlock()
	}
	openSubs := func() []string {
		mu.Lock()
		ids := make([]string, 0, len(subs))
		for id := range subs {
			ids = append(ids, id)
		}
		mu.Unlock()
		var open []string
		for _, id := range ids {
			if rec, err := c.Record(ctx, id); err != nil || !Ended(rec) {
				open = append(open, id)
			}
		}
		return open
	}
	allEnded := func() (bool, []string) {
		open := openSubs()
		return len(open) == 0, open
	}
	var table Table
	defer func() {
		md := table.Markdown()
		t.Logf("fault table (%s=%d, %s=%d):\n%s", EnvKills, nKills, EnvSeed, seed, md)
		if path := os.Getenv(EnvReport); path != "" {
			_ = os.WriteFile(path, []byte(md), 0o644)
		}
		if t.Failed() {
			for _, name := range c.ServiceNames() {
				t.Logf("%s: %d restarts after an exit of its own", name, c.Services[name].Restarts())
			}
			if l, err := c.ReadLedger(context.Background()); err == nil {
				for _, d := range l.Dead {
					t.Logf("dead-lettered: %s", d)
				}
			}
			_, open := allEnded()
			for _, id := range open {
				rec, _ := c.Record(context.Background(), id)
				var st []string
				for _, s := range rec.Stages {
					st = append(st, s.Name+" "+s.Status)
				}
				t.Logf("open: %s (%s): %s", id, subs[id], strings.Join(st, ", "))
			}
		}
	}()
	for _, w := range wave {
		submit(w.bundle)
	}

	// The faults, all at once over the pipeline's work. The feeder
	// submits the wave again whenever fewer than two submissions are
	// open before the faults are done, so every fault meets work in hand
	// (a node's death must meet a pipeline that goes on, a kill a stage
	// at work).
	var wg sync.WaitGroup
	faultsDone := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-faultsDone:
				return
			case <-ctx.Done():
				return
			case <-time.After(3 * time.Second): // polling interval, not an assertion
			}
			if open := openSubs(); len(open) < 2 {
				t.Logf("%d submissions open with faults to go: the wave again", len(open))
				for _, w := range wave {
					submit(w.bundle)
				}
			}
		}
	})
	var faults sync.WaitGroup
	var kills []Kill
	var killErr error
	faults.Go(func() {
		kills, killErr = c.KillServices(ctx, KillOptions{Kills: nKills, Rand: rand.New(rand.NewPCG(uint64(seed), 1)), Logf: t.Logf})
	})
	nats := &natsFaults{}
	faults.Go(func() { nats.run(ctx, t, c) })
	ch := &clickHouseFault{}
	faults.Go(func() { ch.run(ctx, t, c) })
	rf := &runnerFault{}
	faults.Go(func() { rf.run(ctx, t, c) })
	faults.Wait()
	close(faultsDone)
	wg.Wait()
	require.NoError(t, killErr, "kills")
	require.Len(t, kills, nKills)
	require.NoError(t, nats.err, "NATS faults")
	require.NoError(t, ch.err, "ClickHouse fault")
	require.NoError(t, rf.err, "runner fault")

	// Every submission ends, as a healthy arena ends it.
	var open []string
	deadline := time.Now().Add(6 * time.Minute)
	for {
		var ended bool
		if ended, open = allEnded(); ended || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second) // polling interval, not an assertion
	}
	refusal := map[string]string{}
	for _, w := range wave {
		refusal[w.bundle] = w.refused
	}
	var wrong []string
	mu.Lock()
	for id, bundle := range subs {
		rec, err := c.Record(ctx, id)
		if err != nil {
			wrong = append(wrong, id+": "+err.Error())
			continue
		}
		if why := healthy(rec, refusal[bundle]); why != "" && Ended(rec) {
			wrong = append(wrong, fmt.Sprintf("%s (%s): %s", id, bundle, why))
		}
	}
	nSubs := len(subs)
	mu.Unlock()

	l, err := c.ReadLedger(ctx)
	require.NoError(t, err)
	jobs, err := c.Jobs(ctx)
	require.NoError(t, err)
	dups := l.Duplicates()
	var dead []string
	for _, d := range l.Dead {
		dead = append(dead, d.String())
	}
	restarts := 0
	for _, s := range c.Services {
		restarts += s.Restarts()
	}
	table = append(table, Fault{Fault: "a service killed with SIGKILL mid-stage, started again", Count: len(kills), Events: len(l.Events),
		Submissions: nSubs, Lost: len(open) + len(wrong), Duplicated: len(dups), DeadLettered: len(l.Dead),
		Note: fmt.Sprintf("%s; %d restarts after an exit of their own", killSpread(kills), restarts)})
	nats.table(&table, l)
	rows, err := c.CheckRows(ctx, l, jobs)
	require.NoError(t, err)
	table = append(table, Fault{Fault: "ClickHouse stopped for 30 s, started again", Count: 1, Rows: rows.Checked,
		Lost: len(rows.Lost), Duplicated: len(rows.Duplicated),
		Note: fmt.Sprintf("%d rows written again collapsed by the replacing key", rows.Collapsed)})
	rf.table(&table, ctx, t, c, jobs)

	// A round on the first pod with the FP8 example, through the same
	// cluster: its steps, its result, its rows.
	var fp8 string
	mu.Lock()
	for id, bundle := range subs {
		if bundle == "fp8-w8a8" && fp8 == "" {
			fp8 = id
		}
	}
	mu.Unlock()
	// The round's runner is stopped (SIGSTOP) mid-job for three of its
	// ack deadlines, then continued: the round's jobs are pinned to its
	// pod, so the other pod's idle runner never takes one (before, it
	// took the stopped runner's job after its ack deadline).
	pause := &pauseFault{pod: c.Pods[0]}
	pctx, stopPause := context.WithCancel(ctx)
	paused := make(chan struct{})
	go func() { defer close(paused); pause.run(pctx, t, c, 3*c.RunnerAckWait) }()
	out, err := c.ArenaWithin(ctx, 10*time.Minute, "round", "start", "--campaign", "qwen3-tiny", "--candidates", fp8, "--pod", c.Pods[0], "--wait")
	stopPause()
	<-paused
	require.NoError(t, err, "round")
	require.Contains(t, out, "round.completed")
	require.Contains(t, out, "Releasing the pod · done")
	roundID := lastWord(out)
	l, err = c.ReadLedger(ctx)
	require.NoError(t, err)
	require.Empty(t, l.Duplicates(), "facts published twice")
	steps := 0
	for _, e := range l.Of(roundID) {
		if e.Type == string(events.RoundStep) {
			steps++
		}
	}
	require.Positive(t, steps)
	jobs, err = c.Jobs(ctx)
	require.NoError(t, err)
	roundRows, err := c.CheckRows(ctx, l, jobs)
	require.NoError(t, err)
	require.Empty(t, roundRows.Lost, "rows of the round")
	require.NoError(t, pause.err, "the round's runner stopped mid-job")
	require.NotEmpty(t, pause.job, "the round's runner was stopped mid-job")
	served := 0
	for _, j := range jobs {
		if j.Round != roundID {
			continue
		}
		served++
		for _, r := range j.Runners {
			require.Equal(t, c.Pods[0]+"/runner", r, "job %s of the round on pod %s started by %s", j.ID, c.Pods[0], r)
		}
		require.Equal(t, "completed", j.Outcome, "job %s of the round", j.ID)
		require.Equal(t, c.Pods[0]+"/runner", j.By, "job %s of the round", j.ID)
	}
	require.Positive(t, served)
	t.Logf("round: job %s held on %s through a %s stop (started %d time(s)); %d jobs of the round, all served on %s",
		pause.job, c.Pods[0], 3*c.RunnerAckWait, jobs[pause.job].Starts, served, c.Pods[0])

	// Every service serves /metrics: each counts the messages its bus
	// consumed since its latest start. Those that ran the round after
	// the kills (the gateway projects its events, the round service
	// follows its jobs, the first pod's runner served them) consumed
	// some; so did every stage service never killed (each submission
	// passes through all of them). A killed one may have restarted after
	// its last message: its scrape must answer, its count is logged.
	consumed, err := c.Consumed(ctx)
	require.NoError(t, err)
	t.Logf("messages consumed since each service's latest start, by /metrics: %v", consumed)
	for _, name := range []string{"gateway", "round", "runner-" + c.Pods[0]} {
		require.Positive(t, consumed[name], "%s's consumed messages, by /metrics", name)
	}
	for _, name := range []string{"build", "contract", "quality", "efficiency", "score"} {
		if starts := c.Services[name].Starts(); starts == 1 {
			require.Positive(t, consumed[name], "%s's consumed messages, by /metrics (never restarted)", name)
		}
	}

	require.Empty(t, open, "submissions that never ended")
	require.Empty(t, wrong, "submissions that ended otherwise than a healthy arena ends them")
	require.Empty(t, dups, "facts published twice")
	require.Empty(t, dead, "dead-lettered messages")
	require.Empty(t, nats.lost(l), "events published before a node's death and gone after")
	require.Empty(t, rows.Lost, "rows the log calls for that the store lacks")
	require.Empty(t, rows.Duplicated, "rows twice under FINAL")
	require.Empty(t, rf.problems, "the runner killed mid-job")
}

// killSpread says how the kills fell: per service.
func killSpread(kills []Kill) string {
	per := map[string]int{}
	for _, k := range kills {
		per[k.Service]++
	}
	var parts []string
	for _, name := range append([]string{}, Services...) {
		for s, n := range per {
			if s == name || strings.HasPrefix(s, name+"-") {
				parts = append(parts, fmt.Sprintf("%s %d", s, n))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// awaitJobs waits until some runner job has started: the GPU stages are
// at work.
func awaitJobs(ctx context.Context, c *Cluster) error {
	for {
		jobs, err := c.Jobs(ctx)
		if err == nil && len(jobs) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond): // polling interval, not an assertion
		}
	}
}

// natsFaults kills the node that leads ARENA, then the meta leader, each
// started again once the pipeline went on without it.
type natsFaults struct {
	err    error
	before []nodeKill
}

type nodeKill struct {
	what, node string
	// ids are the events ARENA held before the kill.
	ids []string
	// grew is how many events the pipeline added while the node was down.
	grew uint64
}

func (f *natsFaults) run(ctx context.Context, t *testing.T, c *Cluster) {
	if f.err = awaitJobs(ctx, c); f.err != nil {
		return
	}
	for _, which := range []string{"the node that leads the ARENA stream", "the meta leader"} {
		var n *Node
		if which == "the meta leader" {
			n, f.err = c.MetaLeader(ctx)
		} else {
			n, f.err = c.StreamLeader(ctx, events.StreamArena)
		}
		if f.err != nil {
			return
		}
		var l Ledger
		if l, f.err = c.ReadLedger(ctx); f.err != nil {
			return
		}
		k := nodeKill{what: which, node: n.Name}
		for _, e := range l.Events {
			k.ids = append(k.ids, e.ID)
		}
		last := l.Events[len(l.Events)-1].Seq
		t.Logf("NATS: killing %s, %s, after sequence %d", which, n.Name, last)
		if f.err = n.Kill(); f.err != nil {
			return
		}
		var grown uint64
		if grown, f.err = c.WaitGrowth(ctx, events.StreamArena, last, 3*time.Minute); f.err != nil {
			f.err = fmt.Errorf("with %s down the pipeline did not go on: %w", n.Name, f.err)
			return
		}
		k.grew = grown - last
		if f.err = c.Rejoin(ctx, n); f.err != nil {
			return
		}
		t.Logf("NATS: %s rejoined, current on every stream", n.Name)
		f.before = append(f.before, k)
	}
	f.err = f.stale(ctx, t, c)
}

// stale brings a node back with a stale store: a follower of ARENA is
// killed and its JetStream folder copied, started again, killed once the
// pipeline has gone on, and started from the old copy. It must catch up
// (a current replica of every stream again) and nothing held before be
// lost.
func (f *natsFaults) stale(ctx context.Context, t *testing.T, c *Cluster) error {
	leader, err := c.StreamLeader(ctx, events.StreamArena)
	if err != nil {
		return err
	}
	var n *Node
	for _, m := range c.Nodes {
		if m != leader {
			n = m
			break
		}
	}
	snap := filepath.Join(c.Dir, n.Name+"-stale")
	if err := n.Kill(); err != nil {
		return err
	}
	if err := n.Snapshot(snap); err != nil {
		return err
	}
	if err := c.Rejoin(ctx, n); err != nil {
		return err
	}
	info, err := c.streamInfo(ctx, events.StreamArena)
	if err != nil {
		return err
	}
	from := info.State.LastSeq
	grown, err := c.WaitGrowth(ctx, events.StreamArena, from, 3*time.Minute)
	if err != nil {
		return fmt.Errorf("the pipeline did not go on after %s's snapshot: %w", n.Name, err)
	}
	l, err := c.ReadLedger(ctx)
	if err != nil {
		return err
	}
	k := nodeKill{what: "a follower of ARENA, started from a stale copy of its store", node: n.Name, grew: grown - from}
	for _, e := range l.Events {
		k.ids = append(k.ids, e.ID)
	}
	t.Logf("NATS: %s restarted from a store %d+ events stale", n.Name, grown-from)
	if err := n.Kill(); err != nil {
		return err
	}
	if err := n.Restore(snap); err != nil {
		return err
	}
	if err := c.Rejoin(ctx, n); err != nil {
		return fmt.Errorf("stale store: %w", err)
	}
	t.Logf("NATS: %s caught up from its stale store, current on every stream", n.Name)
	f.before = append(f.before, k)
	return nil
}

// lost lists the events held before a kill that the log no longer holds.
func (f *natsFaults) lost(l Ledger) []string {
	have := map[string]bool{}
	for _, e := range l.Events {
		have[e.ID] = true
	}
	var out []string
	for _, k := range f.before {
		for _, id := range k.ids {
			if !have[id] {
				out = append(out, k.node+": "+id)
			}
		}
	}
	return out
}

func (f *natsFaults) table(t *Table, l Ledger) {
	have := map[string]bool{}
	for _, e := range l.Events {
		have[e.ID] = true
	}
	for _, k := range f.before {
		lost := 0
		for _, id := range k.ids {
			if !have[id] {
				lost++
			}
		}
		if strings.Contains(k.what, "stale") {
			*t = append(*t, Fault{Fault: "NATS: " + k.what, Count: 1, Events: len(k.ids), Lost: lost,
				Note: fmt.Sprintf("its store missed %d+ events; it caught up, current on every stream", k.grew)})
			continue
		}
		*t = append(*t, Fault{Fault: "NATS: " + k.what + " killed with SIGKILL, started again", Count: 1, Events: len(k.ids), Lost: lost,
			Note: fmt.Sprintf("%d events published on the other two nodes while it was down; it rejoined, current on every stream", k.grew)})
	}
}

// clickHouseFault stops ClickHouse for 30 s while runners write
// telemetry, then starts it again.
type clickHouseFault struct{ err error }

func (f *clickHouseFault) run(ctx context.Context, t *testing.T, c *Cluster) {
	if f.err = awaitJobs(ctx, c); f.err != nil {
		return
	}
	t.Logf("ClickHouse: stopping for 30 s")
	c.CH.Terminate(10 * time.Second)
	select {
	case <-ctx.Done():
		f.err = ctx.Err()
		return
	case <-time.After(30 * time.Second): // the fault's length, not an assertion
	}
	if f.err = c.CH.Start(); f.err != nil {
		return
	}
	f.err = c.CH.WaitReady(ctx, time.Minute)
	t.Logf("ClickHouse: back")
}

// runnerFault kills a runner with SIGKILL while it runs an efficiency
// job and keeps it down until the job has ended: the job must be
// redelivered to the other runner after its ack deadline, the dead
// runner's engine must die with it, the job's GPU-hours be charged once.
type runnerFault struct {
	err      error
	job      string
	runner   string
	engines  []int
	outlived int
	problems []string
}

func (f *runnerFault) run(ctx context.Context, t *testing.T, c *Cluster) {
	var victim *Service
	for victim == nil {
		jobs, err := c.Jobs(ctx)
		if err == nil {
			for _, r := range c.Runners() {
				j := Current(jobs, r.Pod+"/runner")
				if j != nil && j.Kind == events.JobEfficiency && j.Starts == 1 && r.Running() {
					if f.engines = Children(r.PID()); len(f.engines) > 0 {
						victim, f.job = r, j.ID
						break
					}
				}
			}
		}
		if victim != nil {
			break
		}
		select {
		case <-ctx.Done():
			f.err = ctx.Err()
			return
		case <-time.After(300 * time.Millisecond): // polling interval, not an assertion
		}
	}
	f.runner = victim.Pod + "/runner"
	t.Logf("runner: killing %s mid-job %s (its engines %v)", victim.Name, f.job, f.engines)
	victim.Hold()
	defer victim.Release()
	if f.err = victim.Kill(); f.err != nil {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range f.engines {
		for Alive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // polling interval, not an assertion
		}
		if Alive(pid) {
			f.outlived++
		}
	}
	defer func() { _ = victim.Start() }()
	for {
		jobs, err := c.Jobs(ctx)
		if err == nil && jobs[f.job] != nil && jobs[f.job].Outcome != "" {
			t.Logf("runner: job %s %s by %s", f.job, jobs[f.job].Outcome, jobs[f.job].By)
			return
		}
		select {
		case <-ctx.Done():
			f.err = fmt.Errorf("job %s of the killed runner never ended: %w", f.job, ctx.Err())
			return
		case <-time.After(time.Second): // polling interval, not an assertion
		}
	}
}

func (f *runnerFault) table(t *Table, ctx context.Context, tt *testing.T, c *Cluster, jobs map[string]*JobRun) {
	j := jobs[f.job]
	if j == nil {
		f.problems = append(f.problems, "the job is not in the log")
		return
	}
	if j.Outcome != "completed" {
		f.problems = append(f.problems, "the job ended "+j.Outcome)
	}
	if j.By == f.runner {
		f.problems = append(f.problems, "the job ended on the runner that was killed")
	}
	if f.outlived > 0 {
		f.problems = append(f.problems, fmt.Sprintf("%d engine processes outlived their runner", f.outlived))
	}
	// GPU-hours: the record's are the completed job's, and the
	// participant's ledger charged the job once.
	rec, err := c.Record(ctx, j.Submission)
	if err != nil {
		f.problems = append(f.problems, err.Error())
	} else if rec.Result.GPUHours == nil || *rec.Result.GPUHours != j.GPUHours {
		f.problems = append(f.problems, fmt.Sprintf("the record's GPU-hours %v are not the job's %v", rec.Result.GPUHours, j.GPUHours))
	}
	charges, err := c.Charges(ctx, "example-team", f.job)
	if err != nil {
		f.problems = append(f.problems, err.Error())
	} else if len(charges) != 1 || charges[0] != j.GPUHours {
		f.problems = append(f.problems, fmt.Sprintf("the job was charged %v GPU-hours, want once %v", charges, j.GPUHours))
	}
	dup := 0
	if len(charges) > 1 {
		dup = len(charges) - 1
	}
	lost := 0
	if j.Outcome != "completed" {
		lost = 1
	}
	*t = append(*t, Fault{Fault: "a runner killed with SIGKILL mid-job", Count: 1, Lost: lost, Duplicated: dup,
		Note: fmt.Sprintf("job started by %s, completed by %s after its ack deadline; %d of %d engine processes outlived the runner; GPU-hours charged %d time(s)",
			strings.Join(j.Runners, " then "), j.By, f.outlived, len(f.engines), len(charges))})
	if len(f.problems) > 0 {
		tt.Logf("runner fault: %s", strings.Join(f.problems, "; "))
	}
}

// Charges lists the GPU-hours the participant's usage ledger charged for
// job.
func (c *Cluster) Charges(ctx context.Context, participant, job string) ([]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := c.JS.KeyValue(ctx, "participant_usage")
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, "u."+participant)
	if err != nil {
		return nil, err
	}
	var u struct {
		GPU []struct {
			Job   string  `json:"job"`
			Hours float64 `json:"hours"`
		} `json:"gpu"`
	}
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return nil, err
	}
	var out []float64
	for _, g := range u.GPU {
		if g.Job == job {
			out = append(out, g.Hours)
		}
	}
	return out, nil
}

// pauseFault stops the runner of a round's pod (SIGSTOP) once it runs one
// of the round's jobs, for longer than its ack deadline, then continues it.
type pauseFault struct {
	pod string
	job string
	err error
}

func (f *pauseFault) run(ctx context.Context, t *testing.T, c *Cluster, hold time.Duration) {
	runner := c.Services["runner-"+f.pod]
	for f.job == "" {
		if jobs, err := c.Jobs(ctx); err == nil {
			if j := Current(jobs, f.pod+"/runner"); j != nil && j.Round != "" {
				f.job = j.ID
				break
			}
		}
		select {
		case <-ctx.Done():
			return // the round ended before a job of it was seen running
		case <-time.After(300 * time.Millisecond): // polling interval, not an assertion
		}
	}
	t.Logf("round: stopping %s mid-job %s for %s", runner.Name, f.job, hold)
	if f.err = runner.Pause(); f.err != nil {
		return
	}
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	f.err = runner.Resume()
}
