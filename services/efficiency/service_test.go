package efficiency_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/stage/stagetest"
	"github.com/lowbarena/lowbarena/services/efficiency"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start runs the stage on a bus with set until the test ends.
func start(t *testing.T, set campaign.Set) (*bus.Bus, context.Context) {
	t.Helper()
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	s, err := efficiency.New(ctx, b, quiet(), efficiency.Options{Campaigns: set})
	require.NoError(t, err)
	for _, a := range s.Actors() {
		go func() { _ = a.Run(ctx) }()
	}
	return b, ctx
}

// TestStageContract runs the stage kit's contract against the stage's own
// declaration.
func TestStageContract(t *testing.T) {
	b, _ := bustest.Bus(t)
	s, err := efficiency.New(context.Background(), b, quiet(), efficiency.Options{})
	require.NoError(t, err)
	st := s.Stage()
	require.Equal(t, efficiency.Name, st.Name())
	require.Equal(t, "efficiency", st.RequestsConfig().Name)
	require.Equal(t, "efficiency-results", st.ResultsConfig().Name)
	require.Equal(t, events.JobOutcomeFilters(events.JobEfficiency), st.ResultsConfig().Subjects)
	in := *bustest.Sample(events.ContractCompleted).(*events.ContractCompletedData)
	out := *bustest.Sample(events.EfficiencyCompleted).(*events.EfficiencyCompletedData)
	stagetest.JobContract(t, st, in, out)
}

// TestContractBecomesAJob runs the stage on NATS with the example
// campaign: a kept contract becomes one runner job carrying the campaign's
// engine, workloads and stored BF16 reference; a redelivered contract
// does not make a second; a runner's failure becomes efficiency.failed
// with its reason; a campaign without an engine is refused.
func TestContractBecomesAJob(t *testing.T) {
	set := exampleCampaigns(t)
	b, ctx := start(t, set)

	cc := kept("sub1")
	for _, id := range []string{"cc-1", "cc-2"} { // the same submission twice
		_, err := bus.Emit(ctx, b, events.Source("contract"), events.Contract.Completed, "sub1", cc, bus.WithID(id))
		require.NoError(t, err)
	}
	// The work queue admits no second consumer: read the job straight off
	// the stream.
	jobs, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	var raw *jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		raw, err = jobs.GetLastMsgForSubject(ctx, "jobs.efficiency."+efficiency.JobID("sub1"))
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	var req events.RunnerJobRequestedData
	require.NoError(t, json.Unmarshal(raw.Data, &req))
	require.Equal(t, efficiency.JobID("sub1"), req.JobID)
	require.Equal(t, examples.EngineCommand, req.Engine)
	require.Equal(t, *artifactRef, req.Checkpoint)
	var p events.EfficiencyJobParams
	require.NoError(t, json.Unmarshal(req.Params, &p))
	require.Equal(t, "fp8", p.KVCacheDType)
	require.Equal(t, 1.02, p.BudgetFactor)
	require.Equal(t, 64, p.Workload.MaxTokens)
	require.Regexp(t, `^[0-9a-f]{64}$`, p.Reference.SHA256)
	require.Equal(t, 256, p.Engine.MaxNumSeqs)
	// The audits' evidence is asked for on the campaign's dev suite,
	// stored beside the reference.
	require.NotNil(t, p.Audit)
	require.Equal(t, "lowb-gen@1/dev", p.Audit.SuiteKey)
	require.Regexp(t, `^[0-9a-f]{64}$`, p.Audit.Suite.SHA256)
	require.Equal(t, 64, p.Audit.MinItems)
	require.InDelta(t, 0.02, p.Audit.Share, 1e-12)
	// Both contracts were handled (each has its started) before the
	// queue is counted.
	require.Eventually(t, func() bool { return len(bustest.Stored(t, b, "arena.efficiency.started.sub1")) == 2 }, 10*time.Second, 20*time.Millisecond)
	info, err := jobs.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "one job however often the contract arrives")

	failed := events.RunnerJobFailedData{JobID: req.JobID, Kind: events.JobEfficiency, SubmissionID: "sub1", Runner: "r1", Pod: "pod-0", GPUHours: 0.25,
		Reason: "engine_oom", Message: "engine died before becoming healthy (last error: torch.OutOfMemoryError); container log tail: ...", LogTail: "torch.OutOfMemoryError"}
	_, err = bus.Emit(ctx, b, events.Source("runner"), events.Job.Failed, req.JobID, failed, bus.WithID("rf-1"))
	require.NoError(t, err)
	e := bustest.Await(t, b, "arena.efficiency.failed.sub1", events.EfficiencyFailed)
	f, err := events.Efficiency.Failed.Decode(e)
	require.NoError(t, err)
	require.Equal(t, events.DeriveID(req.JobID, string(events.EfficiencyFailed)), e.ID())
	require.Equal(t, "engine_oom", f.Reason)
	require.Equal(t, failed.Message, f.Message)
	require.JSONEq(t, `{"log_tail":"torch.OutOfMemoryError","pod":"pod-0","runner":"r1","gpu_hours":0.25}`, string(f.Detail),
		"the failure's detail: log tail, pod, runner and GPU-hours")

	// A campaign without an engine cannot serve.
	set[examples.TaskID].Engine = nil
	cc.SubmissionID = "sub2"
	_, err = bus.Emit(ctx, b, events.Source("contract"), events.Contract.Completed, "sub2", cc, bus.WithID("cc-3"))
	require.NoError(t, err)
	e = bustest.Await(t, b, "arena.efficiency.failed.sub2", events.EfficiencyFailed)
	f, err = events.Efficiency.Failed.Decode(e)
	require.NoError(t, err)
	require.Equal(t, string(reason.CampaignNoEngine), f.Reason)
}

// TestReferenceWithoutWeights: a campaign whose BF16 reference folder
// holds no *.safetensors is refused with campaign_no_reference, and
// nothing is stored or queued.
func TestReferenceWithoutWeights(t *testing.T) {
	set := exampleCampaigns(t)
	set[examples.TaskID] = withoutWeights(t, *set[examples.TaskID])
	b, ctx := start(t, set)
	_, err := bus.Emit(ctx, b, events.Source("contract"), events.Contract.Completed, "sub1", kept("sub1"), bus.WithID("cc-1"))
	require.NoError(t, err)
	e := bustest.Await(t, b, "arena.efficiency.failed.sub1", events.EfficiencyFailed)
	f, err := events.Efficiency.Failed.Decode(e)
	require.NoError(t, err)
	require.Equal(t, string(reason.CampaignNoReference), f.Reason)
	require.Contains(t, f.Message, "no *.safetensors")

	arts, err := b.JetStream().ObjectStore(ctx, bus.ObjectArtifacts)
	require.NoError(t, err)
	_, err = arts.List(ctx)
	require.ErrorIs(t, err, jetstream.ErrNoObjectsFound, "nothing stored")
	jobs, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
	require.NoError(t, err)
	info, err := jobs.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing queued")
}

// TestComponent: the component serves the efficiency stage, takes its
// campaigns from --campaigns (a folder that does not exist is an arena
// with no campaign yet) and a store (the quality job's answers, which
// the audits compare with the engine's under load).
func TestComponent(t *testing.T) {
	c := efficiency.Component()
	require.Equal(t, efficiency.Name, c.Name)
	require.Equal(t, []string{"efficiency"}, c.Stages)
	require.True(t, c.Store)
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	require.NotNil(t, fs.Lookup("campaigns"))
	require.NoError(t, fs.Parse([]string{"--campaigns", t.TempDir() + "/none"}))
	b, _ := bustest.Bus(t)
	actors, err := c.Build(context.Background(), &app.Runtime{Bus: b, Log: quiet()})
	require.NoError(t, err)
	require.Len(t, actors, 1)
	require.Equal(t, efficiency.Name, actors[0].Name)
}
