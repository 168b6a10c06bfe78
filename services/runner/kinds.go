package runner

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// kinds registers the job kinds this runner runs. Adding a kind is one
// more Register here, with its params type and its Run.
func (s *Service) kinds() *Registry {
	r := &Registry{}
	Register(r, Kind[events.EfficiencyJobParams, events.EfficiencyJobResult]{
		Job:    events.EfficiencyJob,
		Engine: func(p *events.EfficiencyJobParams, cmd string) { p.Engine.Command = cmd },
		Fetch: func(p events.EfficiencyJobParams) []Artifact {
			out := []Artifact{{Ref: p.Reference, What: "the campaign's BF16 reference"}}
			if p.Audit != nil {
				out = append(out, Artifact{Ref: p.Audit.Suite, What: "the campaign's eval suite"})
			}
			return out
		},
		Patched: func(p events.EfficiencyJobParams) *EnginePatch {
			return enginePatchOf(p.Engine, p.EngineBundle, p.Patch, p.EngineDigest)
		},
		Run: s.efficiency,
	})
	Register(r, Kind[events.QualityJobParams, events.QualityJobResult]{
		Job:    events.QualityJob,
		Engine: func(p *events.QualityJobParams, cmd string) { p.Engine.Command = cmd },
		Fetch: func(p events.QualityJobParams) []Artifact {
			return []Artifact{{Ref: p.Suite, What: "the campaign's eval suite"}}
		},
		Patched: func(p events.QualityJobParams) *EnginePatch {
			if p.Role == events.RoleBF16 {
				return nil // the reference answers on the campaign's own engine
			}
			return enginePatchOf(p.Engine, p.EngineBundle, p.Patch, p.EngineDigest)
		},
		Run: s.quality,
	})
	Register(r, Kind[events.SLAJobParams, events.EngineRun]{
		Job:    events.SLAJob,
		Engine: func(p *events.SLAJobParams, cmd string) { p.Engine.Command = cmd },
		Patched: func(p events.SLAJobParams) *EnginePatch {
			return enginePatchOf(p.Engine, p.EngineBundle, p.Patch, p.EngineDigest)
		},
		Run: s.sla,
	})
	return r
}

// efficiency measures the candidate beside the pod's BF16 reference
// (cached per pod in the references bucket), then under its budget.
//
// With audits asked for, the run's seed is drawn afresh for every run of
// the job (a redelivered job draws another), so no prompt of its load
// repeats another run's; the seed is kept in the evidence. The
// tokenizer that counts the engine's tokens is the campaign's (its
// reference's tokenizer.json), else the checkpoint's own.
func (s *Service) efficiency(ctx context.Context, env Env, p events.EfficiencyJobParams) (Result[events.EfficiencyJobResult], error) {
	var plan *job.AuditPlan
	if p.Audit != nil {
		st, err := suite.Load(env.Artifacts[1])
		if err != nil {
			return Result[events.EfficiencyJobResult]{}, Fail(reason.SuiteInvalid, err.Error())
		}
		plan = job.NewAuditPlan(st, *p.Audit, rand.Uint64(), env.Artifacts[0], env.Checkpoint)
	}
	er, err := env.Job.Efficiency(ctx, p, env.Checkpoint, env.Artifacts[0], &refCache{kv: s.refs, pod: s.opts.Pod}, plan)
	return Result[events.EfficiencyJobResult]{Value: er, Seconds: er.Seconds, Attrs: []any{"reference_cached", er.Cached}, GPU: &er.JobGPUTime}, err
}

// quality answers the campaign's suite and grades what pure Go grades,
// writing every answer to quality_answers and the graded ones to
// quality_items as they come. Code answers stay ungraded for the quality
// stage: a GPU runner never runs a model's program, so it needs no
// sandbox (no bubblewrap, no user namespaces) whatever the suite holds.
func (s *Service) quality(ctx context.Context, env Env, p events.QualityJobParams) (Result[events.QualityJobResult], error) {
	st, err := suite.Load(env.Artifacts[0])
	if err != nil {
		return Result[events.QualityJobResult]{}, Fail(reason.SuiteInvalid, err.Error())
	}
	sim := env.Simulated()
	qr, err := env.Job.Quality(ctx, p, env.Checkpoint, st, func(ctx context.Context, b []job.Graded) error {
		return s.graded(ctx, env.Request, p, b, sim)
	})
	return Result[events.QualityJobResult]{Value: qr, Seconds: qr.Seconds, GPU: &qr.JobGPUTime}, err
}

// sla serves one round entry through the standard workloads.
func (s *Service) sla(ctx context.Context, env Env, p events.SLAJobParams) (Result[events.EngineRun], error) {
	kv := p.KVCacheDType
	if kv == "" {
		kv = "auto"
	}
	t0 := time.Now()
	sr, err := env.Job.Serve(ctx, env.Job.Candidate(job.Launch{Run: p.Entry, Command: p.Engine.Command, Checkpoint: env.Checkpoint, KVCacheDType: kv,
		MaxNumSeqs: p.Engine.MaxNumSeqs, MaxModelLen: p.Engine.MaxModelLen}), job.Workloads(p.Workload))
	// An SLA job is one engine run: its start, its serving and the time
	// it held the GPU are the run's (in its result's engine_start and
	// serving_seconds).
	gpu := &events.JobGPUTime{HeldSeconds: formula.Round(time.Since(t0).Seconds(), 3)}
	gpu.Add(sr, false)
	return Result[events.EngineRun]{Value: sr, Seconds: sr.Seconds, GPU: gpu}, err
}
