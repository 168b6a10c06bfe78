package record

import "github.com/lowbarena/lowbarena/domain/formula"

// GPUPhases is the GPU time a submission's runner jobs held, by phase, in
// seconds. Held is the GPU held by the jobs from their start on the
// device to their end; Serving the time the workloads' measured requests
// (an efficiency job) or the suite's answers (a quality job) were being
// served; EngineStart the engines' starts, launch to healthy, split into
// Loading (weights, where the engine's log tells), GraphCapture (CUDA
// graphs, where it tells) and OtherStart (the rest of the start: never
// negative). Starts counts the engine starts the jobs paid for; a BF16
// reference reused from an earlier job is not one of them, nor a run
// served by an engine kept from an earlier run with the same settings,
// which Kept counts.
//
// Invariants: EngineStart = Loading + GraphCapture + OtherStart (up to
// rounding); Held >= EngineStart + Serving for a job measured on one
// clock.
type GPUPhases struct {
	Held         float64 `json:"held"`
	Serving      float64 `json:"serving"`
	EngineStart  float64 `json:"engine_start"`
	Loading      float64 `json:"loading"`
	GraphCapture float64 `json:"graph_capture"`
	OtherStart   float64 `json:"other_start"`
	Starts       int     `json:"starts"`
	Kept         int     `json:"kept,omitempty"`
}

// Plus returns p and q summed phase by phase.
func (p GPUPhases) Plus(q GPUPhases) GPUPhases {
	return GPUPhases{Held: p.Held + q.Held, Serving: p.Serving + q.Serving, EngineStart: p.EngineStart + q.EngineStart,
		Loading: p.Loading + q.Loading, GraphCapture: p.GraphCapture + q.GraphCapture, OtherStart: p.OtherStart + q.OtherStart,
		Starts: p.Starts + q.Starts, Kept: p.Kept + q.Kept}
}

// Rounded returns p with every figure rounded to the millisecond.
func (p GPUPhases) Rounded() GPUPhases {
	r := func(v float64) float64 { return formula.Round(v, 3) }
	return GPUPhases{Held: r(p.Held), Serving: r(p.Serving), EngineStart: r(p.EngineStart), Loading: r(p.Loading),
		GraphCapture: r(p.GraphCapture), OtherStart: r(p.OtherStart), Starts: p.Starts, Kept: p.Kept}
}

// GPUSeconds is a submission's GPU-seconds by phase (record.result's
// gpu_seconds): the totals of its jobs, and each job's own (Jobs, keyed
// by job kind: "efficiency", "quality").
//
// Invariant: the totals are the sum of Jobs (SetJob keeps them so), so a
// job's figures folded twice count once.
type GPUSeconds struct {
	GPUPhases
	Jobs map[string]GPUPhases `json:"jobs"`
}

// SetJob sets the figures of the job of kind to p and sums the totals
// again from every job's.
func (g *GPUSeconds) SetJob(kind string, p GPUPhases) {
	if g.Jobs == nil {
		g.Jobs = map[string]GPUPhases{}
	}
	g.Jobs[kind] = p.Rounded()
	var sum GPUPhases
	for _, j := range g.Jobs {
		sum = sum.Plus(j)
	}
	g.GPUPhases = sum.Rounded()
}
