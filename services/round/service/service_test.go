package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/artifact"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/domain/examples"
	round "github.com/lowbarena/lowbarena/services/round/service"
	"github.com/lowbarena/lowbarena/services/runner/job"
	runner "github.com/lowbarena/lowbarena/services/runner/service"
	"github.com/lowbarena/lowbarena/services/store"
	_ "github.com/lowbarena/lowbarena/services/store/chdb"
)

var simengine string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "round-bins-")
	if err != nil {
		panic(err)
	}
	simengine = filepath.Join(dir, "simengine")
	if out, err := exec.Command("go", "build", "-o", simengine, "../../../tools/simengine").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("build simengine: %v\n%s", err, out))
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type harness struct {
	b    *bus.Bus
	st   store.Store
	ctx  context.Context
	svc  *round.Service
	recs map[string]string // submission -> bundle dir
	arts artifact.Store
}

// setup runs a round service and a runner on one NATS, with the example
// campaign served by simengine through a wrapper that crashes the engine
// of one checkpoint digest at start.
func setup(t *testing.T, crashDigest func(dir string) string) (*harness, string) {
	t.Helper()
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	set, err := campaign.LoadDir(filepath.Join(dir, examples.CampaignsDir))
	require.NoError(t, err)
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	crash := crashDigest(dir)
	wrapper := filepath.Join(dir, "engine.sh")
	script := fmt.Sprintf("#!/bin/sh\ncase \"$2\" in */%s) exec %s \"$@\" --fault crash-on-start;; esac\nexec %s \"$@\"\n", crash, simengine, simengine)
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	c := set[examples.TaskID]
	c.Engine.Command = strings.Replace(c.Engine.Command, "simengine", wrapper, 1)
	c.Efficiency.WorkloadSpec = events.WorkloadSpec{RequestsPerSlot: 1, MaxTokens: 16, PromptWords: 32, LongPromptWords: 128}

	st, err := store.Open(ctx, "chdb://"+t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rs, err := runner.New(ctx, b, log, runner.Options{Pod: "pod-r", WorkDir: t.TempDir(), AckWait: 10 * time.Second,
		Job: job.Runner{SampleInterval: 50 * time.Millisecond, HealthTimeout: 20 * time.Second, IdleTimeout: 10 * time.Second, StopGrace: 2 * time.Second}})
	require.NoError(t, err)
	svc, err := round.New(ctx, b, log, round.Options{Campaigns: set, Store: st, Pod: "pod-r"})
	require.NoError(t, err)
	for _, a := range append(rs.Actors(), svc.Actors()...) {
		go func() { _ = a.Run(ctx) }()
	}
	return &harness{b: b, st: st, ctx: ctx, svc: svc, arts: arts, recs: map[string]string{}}, dir
}

// submit stores a bundle's files as an artifact and writes the record a
// submission that kept its contract and was scored would have.
func (h *harness) submit(t *testing.T, id, bundleDir string, qualified bool, contractOK bool, memory float64) string {
	t.Helper()
	ref, err := artifact.PutDir(h.ctx, h.arts, bundleDir)
	require.NoError(t, err)
	drift := 0.5
	reason := "quality tier fail below B"
	ds := &record.Score{Qualified: qualified, Memory: &memory, Drift: &drift}
	if !qualified {
		ds.Reason = &reason
	}
	rec := record.Submission{ID: id, TaskID: examples.TaskID, Participant: "team-" + id, Split: "dev", Status: "done",
		Bundle: &record.Bundle{Digest: ref.SHA256, Bytes: ref.Size, Files: ref.Files},
		Result: record.Result{Contract: &record.Contract{OK: contractOK}, DevScore: ds}}
	body, _ := json.Marshal(rec)
	kv, err := h.b.JetStream().KeyValue(h.ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	_, err = kv.Put(h.ctx, id, body)
	require.NoError(t, err)
	return ref.SHA256
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

func TestRoundOfFiveWithOneDeadEngine(t *testing.T) {
	var dead string
	h, dir := setup(t, func(dir string) string {
		dead = filepath.Join(dir, examples.SubmissionsDir, "nvfp4-w4a4")
		return digestOf(t, dead)
	})
	sub := func(name string) string { return filepath.Join(dir, examples.SubmissionsDir, name) }
	h.submit(t, "c1", sub("fp8-w8a8"), true, true, 1.4)
	h.submit(t, "c2", sub("int4-w4a16-g32"), true, true, 1.66)
	h.submit(t, "c3", dead, true, true, 1.66) // its engine dies at start
	h.submit(t, "c4", sub("bf16-reference"), true, true, 1.0)
	h.submit(t, "c5", sub("int4-w4a16-g32"), false, true, 1.66) // tier fail: disqualified with its reason
	h.submit(t, "broken", sub("bf16-declared-w4"), false, false, 1)

	// A candidate that broke its contract is refused.
	_, err := h.svc.Start(h.ctx, round.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "broken"}})
	require.ErrorContains(t, err, "candidate broken: it broke its contract, so it cannot enter a round")
	_, err = h.svc.Start(h.ctx, round.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "c1"}})
	require.ErrorContains(t, err, "named twice")

	// Through the CLI's request subject, as arena round start does.
	body, _ := json.Marshal(round.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1", "c2", "c3", "c4", "c5"}})
	m, err := h.b.Conn().Request(round.SubjectStart, body, 30*time.Second)
	require.NoError(t, err)
	var rep round.StartReply
	require.NoError(t, json.Unmarshal(m.Data, &rep))
	require.Empty(t, rep.Error)
	require.Equal(t, 23, rep.Steps)
	id := rep.RoundID

	// A second round on the same pod is refused while the first runs.
	_, err = h.svc.Start(h.ctx, round.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
	require.ErrorContains(t, err, "pod pod-r is running round "+id)

	e := bustest.Await(t, h.b, "arena.round.*."+id, events.RoundCompleted, events.RoundFailed)
	require.Equal(t, string(events.RoundCompleted), e.Type(), "%s", e.Data())
	var res events.RoundCompletedData
	require.NoError(t, json.Unmarshal(e.Data(), &res))

	steps := map[int]events.RoundStepData{}
	for _, ev := range bustest.Stored(t, h.b, "arena.round.step."+id) {
		var s events.RoundStepData
		require.NoError(t, json.Unmarshal(ev.Data(), &s))
		if s.Status != "running" {
			steps[s.Step] = s
		}
	}
	require.Len(t, steps, 23, "every step ends")
	for n, s := range steps {
		require.Equal(t, 23, len(steps))
		require.NotNil(t, s.StartedAt, "step %d", n)
		require.NotNil(t, s.FinishedAt, "step %d", n)
		require.False(t, s.FinishedAt.Before(*s.StartedAt), "step %d ends after it starts", n)
	}
	require.Equal(t, "provisioning", steps[1].Phase)
	require.Equal(t, "teardown", steps[23].Phase)
	require.Equal(t, "skipped", steps[7].Status, "no incumbent in a campaign's first round")
	require.Equal(t, "Drift baseline", steps[21].Group)

	status := map[string]events.RoundEntry{}
	for _, en := range res.Entries {
		status[en.EntryID] = en
	}
	require.Equal(t, "disqualified", status["c3"].Status)
	require.Contains(t, status["c3"].Reason, "engine_crashed")
	require.Contains(t, status["c3"].Reason, "container log tail")
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
	list, err := h.svc.List(h.ctx, examples.TaskID)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "complete", list[0].Status)
	require.Equal(t, "c2", list[0].Result.Leader)

	// The next round meets the leader as its incumbent.
	require.Eventually(t, func() bool {
		_, err := h.svc.Start(h.ctx, round.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "the pod is free again")
}

func sha(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// TestRoundWithoutRunnerEnds: no runner takes the round's jobs; each entry
// is disqualified at its deadline and the round ends instead of hanging.
func TestRoundWithoutRunnerEnds(t *testing.T) {
	defer func(d time.Duration) { round.EntryTimeout = d }(round.EntryTimeout)
	round.EntryTimeout = 500 * time.Millisecond
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	set, err := campaign.LoadDir(filepath.Join(dir, examples.CampaignsDir))
	require.NoError(t, err)
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc, err := round.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), round.Options{Campaigns: set, Pod: "lonely"})
	require.NoError(t, err)
	go func() { _ = svc.Actors()[0].Run(ctx) }()
	arts, err := artifact.NewJetStream(ctx, b.JetStream(), bus.ObjectArtifacts)
	require.NoError(t, err)
	h := &harness{b: b, ctx: ctx, arts: arts}
	h.submit(t, "c1", filepath.Join(dir, examples.SubmissionsDir, "fp8-w8a8"), true, true, 1.4)
	r, err := svc.Start(ctx, round.StartRequest{Campaign: examples.TaskID, Candidates: []string{"c1"}})
	require.NoError(t, err)
	e := bustest.Await(t, b, "arena.round.completed."+r.ID, events.RoundCompleted)
	var res events.RoundCompletedData
	require.NoError(t, json.Unmarshal(e.Data(), &res))
	for _, en := range res.Entries {
		require.Equal(t, "disqualified", en.Status, en.EntryID)
		require.Contains(t, en.Reason, "round_job_timeout")
	}
	require.Nil(t, res.TopScore)
}
