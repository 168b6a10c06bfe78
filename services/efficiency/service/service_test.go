package service_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/bustest"
	"github.com/lowbarena/lowbarena/services/domain/record"
	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/domain/examples"
	"github.com/lowbarena/lowbarena/services/efficiency/service"
)

const rec27b = "submission_qwen35-27b_4632bca02a3846d5.json"

func load(t *testing.T, name string) record.Submission {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "schemas", "testdata", "lowbarena", name))
	require.NoError(t, err)
	var r record.Submission
	require.NoError(t, json.Unmarshal(data, &r))
	return r
}

// measurement rebuilds the runner's raw measurement of a fixture record:
// its rates, its peak breakdowns, its engine's start-up, its budget
// replays and its stored bytes.
func measurement(r record.Submission) events.EfficiencyJobResult {
	res := r.Result
	run := func(rates map[string]float64, peaks map[string]record.PeakMemory) events.EngineRun {
		e := events.EngineRun{Workloads: map[string]events.WorkloadRun{}}
		for w, rate := range rates {
			p := peaks[w]
			e.Workloads[w] = events.WorkloadRun{Rate: rate, Peak: p}
		}
		return e
	}
	cand := run(res.Efficiency, res.PeakMemory)
	cand.Startup = res.Engine.Startup
	return events.EfficiencyJobResult{GPU: "NVIDIA H200", Reference: run(res.AnchorEfficiency, res.AnchorPeakMemory), Candidate: cand,
		Budget: res.Engine.Budget, HardCap: res.Engine.HardCap, KVCacheDType: res.Engine.Startup.KVCacheDType,
		StoredBytes: res.Contract.SafetensorBytes}
}

// TestBlockReproducesTheFixture builds the efficiency block from the 27B
// record's raw measurement: the record's figures come back, and its failed
// interactive budget gives the record's sentence.
func TestBlockReproducesTheFixture(t *testing.T) {
	r := load(t, rec27b)
	res := r.Result
	out, err := service.Block(events.RunnerJobCompletedData{SubmissionID: r.ID, Pod: "pod-0", GPUHours: *res.GPUHours}, measurement(r))
	require.NoError(t, err)
	require.Equal(t, res.Efficiency, out.Efficiency)
	require.Equal(t, res.AnchorEfficiency, out.AnchorEfficiency)
	require.Equal(t, res.PeakMemory, out.PeakMemory)
	require.Equal(t, res.AnchorPeakMemory, out.AnchorPeakMemory)
	require.Equal(t, *res.Workload, out.Workload)
	require.Equal(t, res.Engine.Budget, out.Engine.Budget)
	require.Equal(t, res.Engine.Startup, out.Engine.Startup)
	require.Equal(t, res.Engine.StoredGiB, out.Engine.StoredGiB)
	require.Equal(t, *res.DevScore.Reason, out.BudgetReason)
	require.Equal(t, *res.GPUHours, out.GPUHours)
}

func TestBlockRefuses(t *testing.T) {
	r := load(t, rec27b)
	m := measurement(r)
	m.KVCacheDType = "nvfp4" // declared; the engine reported fp8
	_, err := service.Block(events.RunnerJobCompletedData{SubmissionID: r.ID}, m)
	require.ErrorContains(t, err, "declares KV cache dtype nvfp4 but its engine reported running fp8")

	m = measurement(r)
	delete(m.Reference.Workloads, "long_context")
	_, err = service.Block(events.RunnerJobCompletedData{SubmissionID: r.ID}, m)
	require.ErrorContains(t, err, "no long_context rate")
}

func TestSameKV(t *testing.T) {
	for _, tc := range []struct {
		declared, running string
		same              bool
	}{
		{"", "bf16", true}, {"auto", "fp8", true}, {"fp8", "fp8", true}, {"fp8_e4m3", "fp8", true},
		{"nvfp4", "fp8", false}, {"fp8", "bf16", false},
	} {
		require.Equal(t, tc.same, service.SameKV(tc.declared, tc.running), "%+v", tc)
	}
}

// TestContractBecomesAJob runs the stage on NATS with the example
// campaign: a kept contract becomes one runner job carrying the campaign's
// engine, workloads and stored BF16 reference; a redelivered contract
// does not make a second; a runner's failure becomes efficiency.failed
// with its reason; a campaign without an engine is refused.
func TestContractBecomesAJob(t *testing.T) {
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	set, err := campaign.LoadDir(filepath.Join(dir, examples.CampaignsDir))
	require.NoError(t, err)
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := service.New(ctx, b, slog.New(slog.NewTextHandler(io.Discard, nil)), service.Options{Campaigns: set})
	require.NoError(t, err)
	for _, a := range s.Actors() {
		go func() { _ = a.Run(ctx) }()
	}

	art := &events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/a.json", Size: 1, SHA256: strings.Repeat("ab", 32), Files: 3}
	cc := events.ContractCompletedData{SubmissionID: "sub1", Contract: record.Contract{OK: true}, DetectedPrecision: "W8A8KV8",
		TaskID: examples.TaskID, Artifact: art, KVCacheDType: "fp8"}
	for _, id := range []string{"cc-1", "cc-2"} { // the same submission twice
		_, err = b.PublishNew(ctx, id, events.ContractCompleted, events.Source("contract"), "sub1", cc)
		require.NoError(t, err)
	}
	// The work queue admits no second consumer: read the job straight off
	// the stream.
	jobs, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	var raw *jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		raw, err = jobs.GetLastMsgForSubject(ctx, "jobs.efficiency."+service.JobID("sub1"))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	var req events.RunnerJobRequestedData
	require.NoError(t, json.Unmarshal(raw.Data, &req))
	require.Equal(t, service.JobID("sub1"), req.JobID)
	require.Equal(t, examples.EngineCommand, req.Engine)
	require.Equal(t, *art, req.Checkpoint)
	var p events.EfficiencyJobParams
	require.NoError(t, json.Unmarshal(req.Params, &p))
	require.Equal(t, "fp8", p.KVCacheDType)
	require.Equal(t, 1.02, p.BudgetFactor)
	require.Equal(t, 64, p.Workload.MaxTokens)
	require.Regexp(t, `^[0-9a-f]{64}$`, p.Reference.SHA256)
	require.Equal(t, 256, p.Engine.MaxNumSeqs)
	time.Sleep(300 * time.Millisecond)
	info, err := jobs.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "one job however often the contract arrives")

	failed := events.RunnerJobFailedData{JobID: req.JobID, Kind: events.JobEfficiency, SubmissionID: "sub1", Runner: "r1",
		Reason: "engine_oom", Message: "engine died before becoming healthy (last error: torch.OutOfMemoryError); container log tail: ...", LogTail: "torch.OutOfMemoryError"}
	_, err = b.PublishNew(ctx, "rf-1", events.RunnerJobFailed, events.Source("runner"), req.JobID, failed)
	require.NoError(t, err)
	e := bustest.Await(t, b, "arena.efficiency.failed.sub1", events.EfficiencyFailed)
	var f events.StageFailedData
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	require.Equal(t, "engine_oom", f.Reason)
	require.Contains(t, string(f.Detail), "torch.OutOfMemoryError")

	// A campaign without an engine cannot serve.
	set[examples.TaskID].Engine = nil
	cc.SubmissionID = "sub2"
	_, err = b.PublishNew(ctx, "cc-3", events.ContractCompleted, events.Source("contract"), "sub2", cc)
	require.NoError(t, err)
	e = bustest.Await(t, b, "arena.efficiency.failed.sub2", events.EfficiencyFailed)
	require.NoError(t, json.Unmarshal(e.Data(), &f))
	require.Equal(t, service.ReasonNoEngine, f.Reason)
}
