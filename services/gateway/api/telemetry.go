package api

import (
	"context"
	"sort"
	"time"

	"github.com/lowbarena/lowbarena/services/gateway/pages"
)

// requestRow is a measured request of the requests table.
type requestRow struct {
	JobID        string  `ch:"job_id"`
	RunID        string  `ch:"run_id"`
	Workload     string  `ch:"workload"`
	TsMs         uint64  `ch:"ts_ms"`
	TTFTMs       float64 `ch:"ttft_ms"`
	E2EMs        float64 `ch:"e2e_ms"`
	OutputTokens uint32  `ch:"output_tokens"`
	Simulated    uint8   `ch:"simulated"`
}

// sampleRow is a reading of gpu_samples.
type sampleRow struct {
	RunID     string `ch:"run_id"`
	TsMs      uint64 `ch:"ts_ms"`
	MemUsed   uint64 `ch:"mem_used"`
	Simulated uint8  `ch:"simulated"`
}

// telemetryTimeout bounds the store's answers for one page.
const telemetryTimeout = 10 * time.Second

// telemetry reads what the store holds of a submission's efficiency
// job: its requests' latencies and its GPU samples, by engine run.
//
// The efficiency job is found by its data, not its name: the job with
// requests of this submission and a run whose phase is "candidate" (the
// round's SLA jobs name their runs by entry, candidate-1, ...; the
// quality job writes no requests). Of a job delivered more than once,
// the last delivery's runs are shown: the earlier ones died.
func (a *API) telemetry(ctx context.Context, submission string) pages.Telemetry {
	if a.o.Store == nil {
		return pages.Telemetry{Err: pages.NoStore}
	}
	ctx, cancel := context.WithTimeout(ctx, telemetryTimeout)
	defer cancel()
	var reqs []requestRow
	if err := a.o.Store.Select(ctx, &reqs, `SELECT job_id, run_id, workload, ts_ms, ttft_ms, e2e_ms, output_tokens, simulated
		FROM requests FINAL WHERE submission_id = ? AND ok = 1`, submission); err != nil {
		a.o.Log.Warn("telemetry unavailable", "submission", submission, "err", err)
		return pages.Telemetry{Err: "the store did not answer for this submission's GPU samples and latencies; reload to try again"}
	}
	// The job of the latest candidate run.
	job, jobTs := "", uint64(0)
	for _, q := range reqs {
		if _, phase, ok := pages.RunID(q.RunID); ok && phase == "candidate" && q.TsMs >= jobTs {
			job, jobTs = q.JobID, q.TsMs
		}
	}
	if job == "" {
		return pages.Telemetry{}
	}
	// The latest delivery of that job.
	delivery := -1
	for _, q := range reqs {
		if d, _, ok := pages.RunID(q.RunID); ok && q.JobID == job && d > delivery {
			delivery = d
		}
	}
	runs := map[string]*pages.Run{}
	run := func(phase string, ts uint64) *pages.Run {
		r := runs[phase]
		if r == nil {
			r = &pages.Run{Phase: phase, Latency: map[string]pages.Latency{}, StartMs: ts}
			runs[phase] = r
		}
		if ts < r.StartMs {
			r.StartMs = ts
		}
		return r
	}
	byWorkload := map[string]map[string][]pages.Request{}
	for _, q := range reqs {
		d, phase, ok := pages.RunID(q.RunID)
		if !ok || q.JobID != job || d != delivery {
			continue
		}
		r := run(phase, q.TsMs)
		r.Simulated = r.Simulated || q.Simulated == 1
		if byWorkload[phase] == nil {
			byWorkload[phase] = map[string][]pages.Request{}
		}
		byWorkload[phase][q.Workload] = append(byWorkload[phase][q.Workload], pages.Request{TTFTMs: q.TTFTMs, E2EMs: q.E2EMs, OutputTokens: q.OutputTokens})
	}
	for phase, ws := range byWorkload {
		for w, rs := range ws {
			runs[phase].Latency[w] = pages.LatencyOf(rs)
		}
	}
	var samples []sampleRow
	if err := a.o.Store.Select(ctx, &samples, `SELECT run_id, ts_ms, mem_used, simulated FROM gpu_samples FINAL
		WHERE job_id = ? ORDER BY ts_ms, seq`, job); err != nil {
		a.o.Log.Warn("telemetry unavailable", "submission", submission, "err", err)
		return pages.Telemetry{Err: "the store did not answer for this submission's GPU samples; reload to try again"}
	}
	for _, s := range samples {
		d, phase, ok := pages.RunID(s.RunID)
		if !ok || d != delivery {
			continue
		}
		r := run(phase, s.TsMs)
		r.Simulated = r.Simulated || s.Simulated == 1
		r.Samples = append(r.Samples, pages.Sample{Seconds: float64(s.TsMs), GiB: float64(s.MemUsed) / (1 << 30)})
	}
	out := pages.Telemetry{}
	for _, r := range runs {
		// Seconds since the run's first sample.
		if len(r.Samples) > 0 {
			t0 := r.Samples[0].Seconds
			for i := range r.Samples {
				r.Samples[i].Seconds = (r.Samples[i].Seconds - t0) / 1000
			}
		}
		out.Runs = append(out.Runs, *r)
	}
	sort.Slice(out.Runs, func(i, j int) bool { return out.Runs[i].StartMs < out.Runs[j].StartMs })
	return out
}
