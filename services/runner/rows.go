package runner

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lowbarena/lowbarena/domain/stats"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
)

// samples writes a batch of GPU samples to gpu_samples.
func (s *Service) samples(ctx context.Context, req events.RunnerJobRequestedData, run string, seq *atomic.Uint64, b []telemetry.Sample) error {
	if s.opts.Store == nil {
		return nil
	}
	rows := make([]store.GPUSample, len(b))
	for i, x := range b {
		sim := uint8(0)
		if x.Simulated {
			sim = 1
		}
		gpu := x.GPU
		if x.Simulated {
			gpu = s.opts.GPU // one simulated device per engine; the runner's index names it
		}
		// proc_mem holds the engine's memory by the device's count (used
		// over the baseline before it started), the only per-engine
		// figure a runner in a container can have.
		rows[i] = store.GPUSample{TsMs: uint64(x.At.UnixMilli()), Pod: s.opts.Pod, GPU: uint32(gpu), GPUUUID: x.UUID,
			RunID: run, JobID: req.JobID, Seq: seq.Add(1), MemUsed: x.MemUsed, MemTotal: x.MemTotal, ProcMem: x.EngineMem,
			Util: x.Util, Power: x.PowerW, Simulated: sim}
	}
	return store.Insert(ctx, s.opts.Store, rows)
}

// graded writes a quality job's samples: every answer to
// quality_answers, the graded ones to quality_items. The BF16
// reference's rows carry the submission id "bf16-reference".
//
// An ungraded (code) answer's quality_answers row has score 0 and no
// quality_items row: the quality stage grades it and writes both rows
// with this row's ts_ms, so that a quality_items row of the same ts_ms is
// what marks an answer graded, and an answer a redelivered job writes
// again (a later ts_ms) is graded again. Rows of one key are
// ReplacingMergeTree's: read with FINAL, the last inserted wins.
func (s *Service) graded(ctx context.Context, req events.RunnerJobRequestedData, p events.QualityJobParams, b []job.Graded, simulated bool) error {
	if s.opts.Store == nil {
		return nil
	}
	sub := req.SubmissionID
	if p.Role == events.RoleBF16 {
		sub = "bf16-reference"
	}
	sim := uint8(0)
	if simulated {
		sim = 1
	}
	now := uint64(time.Now().UnixMilli())
	name, _, _ := strings.Cut(p.SuiteKey, "@")
	rows := make([]store.QualityItem, 0, len(b))
	answers := make([]store.QualityAnswer, len(b))
	for i, g := range b {
		answers[i] = store.QualityAnswer{TsMs: now, Campaign: p.Campaign, SuiteVersion: p.SuiteKey, SubmissionID: sub, Role: p.Role,
			ItemID: g.Item.ID, Sample: uint32(g.Sample), Score: g.Score, OutputTokens: uint32(g.OutputTokens), Answer: g.Answer}
		if g.Ungraded {
			continue
		}
		f := uint8(0)
		if g.Formatted {
			f = 1
		}
		rows = append(rows, store.QualityItem{TsMs: now, Campaign: p.Campaign, Suite: name, SuiteVersion: p.SuiteKey, SubmissionID: sub, Role: p.Role,
			Domain: g.Item.Domain, ItemID: g.Item.ID, Sample: uint32(g.Sample), Score: g.Score, Formatted: f,
			OutputTokens: uint32(g.OutputTokens), Simulated: sim})
	}
	// The answers first: quality_items complete is what the quality
	// stage reads as done, and the audits read the answers after it.
	if err := store.Insert(ctx, s.opts.Store, answers); err != nil {
		return err
	}
	return store.Insert(ctx, s.opts.Store, rows)
}

// requests writes a workload's measured requests to requests.
func (s *Service) requests(ctx context.Context, req events.RunnerJobRequestedData, run string, res loadgen.Result, simulated bool) error {
	if s.opts.Store == nil || len(res.Samples) == 0 {
		return nil
	}
	sim := uint8(0)
	if simulated {
		sim = 1
	}
	rows := make([]store.Request, len(res.Samples))
	for i, x := range res.Samples {
		itl := make([]float64, len(x.ITL))
		for j, d := range x.ITL {
			itl[j] = float64(d) / float64(time.Millisecond)
		}
		rows[i] = store.Request{TsMs: uint64(x.Start.UnixMilli()), SubmissionID: req.SubmissionID, JobID: req.JobID, RunID: run,
			Workload: res.Workload, Seq: uint32(x.Seq), PromptTokens: uint32(x.PromptTokens), OutputTokens: uint32(x.OutputTokens),
			TTFTMs: float64(x.TTFT) / float64(time.Millisecond), ITLP50Ms: stats.Percentile(itl, 50), ITLP99Ms: stats.Percentile(itl, 99),
			E2EMs: float64(x.E2E) / float64(time.Millisecond), OK: 1, Simulated: sim}
		if x.Err != "" {
			rows[i].OK, rows[i].Error = 0, x.Err+": "+x.ErrMessage
		}
	}
	return store.Insert(ctx, s.opts.Store, rows)
}

// addGPUSeconds hands the job's writer the gpu_seconds row of one
// delivery of it (attempt), whose run used its GPU as t tells (nil: no
// row) and ended with err.
func (s *Service) addGPUSeconds(rows *rowWriter, req events.RunnerJobRequestedData, attempt uint64, t *events.JobGPUTime, err error, simulated bool) {
	if t == nil {
		return
	}
	status := "completed"
	if err != nil {
		status = "failed"
	}
	g := *t
	rows.add(func(ctx context.Context) error { return s.gpuSeconds(ctx, req, attempt, status, g, simulated) })
}

// gpuSeconds writes how one delivery of a job used its GPU (table
// gpu_seconds): the time it held the GPU, the time it served, and its
// engine starts by phase. status is "completed" or "failed" (a job handed
// back writes the delivery's row too: it held the GPU).
func (s *Service) gpuSeconds(ctx context.Context, req events.RunnerJobRequestedData, attempt uint64, status string, t events.JobGPUTime, simulated bool) error {
	if s.opts.Store == nil {
		return nil
	}
	p := t.Phases()
	cached := 0
	for _, st := range t.Starts {
		if st.Cached {
			cached++
		}
	}
	sim := uint8(0)
	if simulated {
		sim = 1
	}
	row := store.GPUSeconds{TsMs: uint64(time.Now().UnixMilli()), SubmissionID: req.SubmissionID, RoundID: req.RoundID, JobID: req.JobID,
		Attempt: uint32(attempt), Kind: req.Kind, Pod: s.opts.Pod, Status: status, HeldS: p.Held, ServingS: p.Serving,
		EngineStartS: p.EngineStart, LoadingS: p.Loading, GraphCaptureS: p.GraphCapture, OtherStartS: p.OtherStart,
		Starts: uint32(p.Starts), CachedStarts: uint32(cached), Simulated: sim}
	return store.Insert(ctx, s.opts.Store, []store.GPUSeconds{row})
}
