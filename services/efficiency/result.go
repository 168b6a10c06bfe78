package efficiency

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// Result turns a finished efficiency job into the record's efficiency
// block (see Block), or into a refusal: efficiency_bad_measurement for a
// result that does not decode or lacks a workload's rate or peak,
// engine_kv_dtype_mismatch for an engine that ran another KV dtype than
// the declared one. It is a pure function of the job's outcome: never a
// retry.
func Result(c events.RunnerJobCompletedData) (events.EfficiencyCompletedData, error) {
	res, err := events.EfficiencyJob.Result(c)
	if err != nil {
		return events.EfficiencyCompletedData{}, stage.Refuse(reason.EfficiencyBadMeasurement, "the runner's result does not decode: "+err.Error())
	}
	out, err := Block(c, res)
	if err != nil {
		var mm *kvMismatch
		if errors.As(err, &mm) {
			return out, stage.Refuse(reason.EngineKVDTypeMismatch, err.Error())
		}
		return out, stage.Refuse(reason.EfficiencyBadMeasurement, err.Error())
	}
	return out, nil
}

// kvMismatch is an engine that ran a KV dtype other than the declared one.
type kvMismatch struct{ declared, running string }

func (e *kvMismatch) Error() string {
	return fmt.Sprintf("the submission declares KV cache dtype %s but its engine reported running %s", e.declared, e.running)
}

// Block builds the record's efficiency block from a runner's measurement.
func Block(c events.RunnerJobCompletedData, res events.EfficiencyJobResult) (events.EfficiencyCompletedData, error) {
	out := events.EfficiencyCompletedData{SubmissionID: c.SubmissionID, GPU: res.GPU, Simulated: res.Simulated, Pod: c.Pod, BundleDigest: c.CheckpointDigest,
		GPUHours: c.GPUHours, Efficiency: map[string]float64{}, AnchorEfficiency: map[string]float64{},
		PeakMemory: map[string]record.PeakMemory{}, AnchorPeakMemory: map[string]record.PeakMemory{}}
	out.GPUSeconds = res.Timed()
	for _, w := range formula.Workloads {
		cw, ok1 := res.Candidate.Workloads[w.Name]
		rw, ok2 := res.Reference.Workloads[w.Name]
		if !ok1 || !ok2 || cw.Rate <= 0 || rw.Rate <= 0 || cw.Peak.PeakGiB <= 0 || rw.Peak.PeakGiB <= 0 {
			return out, fmt.Errorf("the runner measured no %s rate or peak for the submission or its BF16 reference", w.Name)
		}
		out.Efficiency[w.Name], out.AnchorEfficiency[w.Name] = cw.Rate, rw.Rate
		out.PeakMemory[w.Name], out.AnchorPeakMemory[w.Name] = cw.Peak, rw.Peak
	}
	first := formula.First
	out.Workload = record.Workload{
		BF16:       record.WorkloadFigures{PeakGiB: out.AnchorPeakMemory[first].PeakGiB, Rate: out.AnchorEfficiency[first]},
		Submission: record.WorkloadFigures{PeakGiB: out.PeakMemory[first].PeakGiB, Rate: out.Efficiency[first]},
	}
	running := res.Candidate.Startup.KVCacheDType
	if !SameKV(res.KVCacheDType, running) {
		return out, &kvMismatch{declared: res.KVCacheDType, running: running}
	}
	// The audit block holds the KV check here; the stage adds the
	// engine's audits (audit.Judge) once it can compare them.
	audit := &record.Audit{KVCacheDTypeDeclared: res.KVCacheDType, KVCacheDTypeEngine: running, ReferenceCached: res.Cached, Pod: c.Pod, GPUIndex: c.GPUIndex}
	out.Engine = record.Engine{Audit: audit, Budget: res.Budget, HardCap: res.HardCap, Startup: res.Candidate.Startup,
		StoredGiB: formula.StoredGiB(res.StoredBytes)}
	if out.Engine.Budget == nil {
		out.Engine.Budget = map[string]record.Budget{}
	}
	out.BudgetReason = Verdict(res)
	return out, nil
}

// Verdict is the first failed budget's sentence in the records' order of
// workloads, or "" when every budget held.
func Verdict(res events.EfficiencyJobResult) string {
	keys := slices.Sorted(maps.Keys(res.Budget))
	for _, w := range formula.Workloads {
		for _, key := range keys {
			b := res.Budget[key]
			if !strings.HasPrefix(key, w.Name+"@") || b.Healthy {
				continue
			}
			return formula.Reason(w.Name, formula.Budget{Factor: b.Factor, BudgetGiB: b.BudgetGiB, CapGiB: b.CapGiB},
				formula.Replay{Running: b.Running, Full: b.FullRunning, Rate: b.Value, Upper: b.KeptUpper}, res.Candidate.Workloads[w.Name].Rate)
		}
	}
	return ""
}

// SameKV reports whether an engine that reports running KV dtype kept a
// declared one. A declaration of "" or "auto" leaves the choice to the
// engine (the model's dtype); fp8 and fp8_e4m3 are one dtype.
func SameKV(declared, running string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimSpace(s))
		switch s {
		case "fp8_e4m3", "fp8e4m3":
			return "fp8"
		case "bfloat16":
			return "bf16"
		}
		return s
	}
	d := norm(declared)
	if d == "" || d == "auto" {
		return true
	}
	return d == norm(running)
}
