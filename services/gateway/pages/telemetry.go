package pages

import (
	"strconv"
	"strings"

	"github.com/lowbarena/lowbarena/domain/stats"
)

// Telemetry is what the store holds of a submission's efficiency job:
// each engine run's GPU memory over time (gpu_samples) and its requests'
// latencies (requests). The record keeps rates and peaks; these are the
// figures behind them.
type Telemetry struct {
	// Runs are the job's engine runs in the order they ran: the BF16
	// reference when this job measured it, the candidate, the budget
	// replays.
	Runs []Run
	// Err says why the store could not be read; NoStore when the
	// gateway has none. Empty when it was read (Runs may still be
	// empty: a record from before the store, or a job that never ran).
	Err string
}

// NoStore is Telemetry.Err for a gateway without a store.
const NoStore = "this gateway has no store, so the figures behind the record (GPU samples, request latencies) are not shown"

// Run is one engine run of an efficiency job.
type Run struct {
	// Phase names the run: reference, candidate, or a budget replay's
	// key ("serve@1.02").
	Phase string
	// Samples are the GPU memory in use, Seconds since the run's first
	// sample.
	Samples []Sample
	// Latency holds its requests' percentiles by workload.
	Latency map[string]Latency
	// Simulated says a sample or a request came from a simulated GPU or
	// engine.
	Simulated bool
	// StartMs is the run's first sample or request, unix milliseconds.
	StartMs uint64
}

// Sample is the GPU memory in use at Seconds since its run's start.
type Sample struct{ Seconds, GiB float64 }

// Latency is a workload's latency percentiles over its successful
// requests, in milliseconds: time to first token, and time per output
// token after it ((end to end - TTFT) / (tokens - 1), over the requests
// of more than one token).
type Latency struct {
	Requests           int
	TTFTP50, TTFTP99   float64
	TPOTP50, TPOTP99   float64
	TPOTRequests       int
	OutputTokensPerReq float64
}

// Request is one measured request, as the requests table keeps it.
type Request struct {
	TTFTMs, E2EMs float64
	OutputTokens  uint32
}

// LatencyOf computes a workload's percentiles the way the runner's load
// generator does (linear interpolation between the nearest ranks), so
// that they are the job's own figures.
func LatencyOf(reqs []Request) Latency {
	l := Latency{Requests: len(reqs)}
	var ttft, tpot []float64
	tokens := 0.0
	for _, r := range reqs {
		ttft = append(ttft, r.TTFTMs)
		tokens += float64(r.OutputTokens)
		if r.OutputTokens > 1 {
			tpot = append(tpot, (r.E2EMs-r.TTFTMs)/float64(r.OutputTokens-1))
		}
	}
	l.TTFTP50, l.TTFTP99 = stats.Percentile(ttft, 50), stats.Percentile(ttft, 99)
	l.TPOTP50, l.TPOTP99 = stats.Percentile(tpot, 50), stats.Percentile(tpot, 99)
	l.TPOTRequests = len(tpot)
	if len(reqs) > 0 {
		l.OutputTokensPerReq = tokens / float64(len(reqs))
	}
	return l
}

// RunID splits a runner's run id, "<job>-<delivery>/<phase>", into the
// job's delivery and the phase; ok is false for another form.
func RunID(id string) (delivery int, phase string, ok bool) {
	head, phase, ok := strings.Cut(id, "/")
	if !ok || phase == "" {
		return 0, "", false
	}
	i := strings.LastIndexByte(head, '-')
	if i < 0 {
		return 0, "", false
	}
	n, err := strconv.Atoi(head[i+1:])
	if err != nil {
		return 0, "", false
	}
	return n, phase, true
}

// Thin keeps at most n samples, each bucket's highest (so a peak is
// never thinned away), in order.
func Thin(s []Sample, n int) []Sample {
	if n < 2 || len(s) <= n {
		return s
	}
	out := make([]Sample, 0, n)
	per := float64(len(s)) / float64(n)
	for i := 0; i < n; i++ {
		lo, hi := int(float64(i)*per), int(float64(i+1)*per)
		if hi > len(s) {
			hi = len(s)
		}
		if lo >= hi {
			continue
		}
		best := s[lo]
		for _, x := range s[lo:hi] {
			if x.GiB > best.GiB {
				best = x
			}
		}
		out = append(out, best)
	}
	return out
}
