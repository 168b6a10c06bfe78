// Package formula holds the efficiency stage's arithmetic: speeds and
// memories against the BF16 reference measured on the same GPU, their
// geometric means and the efficiency gain, the memory saved, the peak
// memory breakdown, and the budget replay's verdict. Every function is pure
// and follows the arena's records (seed formulas §3 to §5); the golden
// tests recompute the fixtures' derived fields from their raw ones.
package formula

import (
	"errors"
	"fmt"
	"math"
)

// Workload is one of the three load shapes.
type Workload struct {
	// Name is the key in the record's maps.
	Name string
	// Concurrency is how many requests it keeps in flight: the
	// full_running of its budget replay.
	Concurrency int
}

// Workloads in the order the records list them: serve is the first
// workload (the record's workload block and memory_saved use it).
var Workloads = []Workload{
	{Name: "serve", Concurrency: 32},
	{Name: "interactive", Concurrency: 1},
	{Name: "long_context", Concurrency: 64},
}

// First is the workload the record's workload block and memory_saved use.
const First = "serve"

// ErrMissing is returned when a workload has no figure.
var ErrMissing = errors.New("formula: a workload has no figure")

// Round rounds half away from zero to dp decimals, as the records do.
func Round(x float64, dp int) float64 {
	p := math.Pow(10, float64(dp))
	return math.Round(x*p) / p
}

// Ratios divides num[w] by den[w] for every workload of Workloads.
func Ratios(num, den map[string]float64) (map[string]float64, error) {
	out := make(map[string]float64, len(Workloads))
	for _, w := range Workloads {
		n, ok1 := num[w.Name]
		d, ok2 := den[w.Name]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: %s", ErrMissing, w.Name)
		}
		if d <= 0 || n <= 0 {
			return nil, fmt.Errorf("formula: %s: ratio of %v to %v is not of two positive figures", w.Name, n, d)
		}
		out[w.Name] = n / d
	}
	return out, nil
}

// Speeds are rate[w] / bf16_rate[w] (output tokens per second).
func Speeds(rate, bf16Rate map[string]float64) (map[string]float64, error) {
	return Ratios(rate, bf16Rate)
}

// Memories are bf16_peak[w] / peak[w].
func Memories(peak, bf16Peak map[string]float64) (map[string]float64, error) {
	return Ratios(bf16Peak, peak)
}

// GeoMean is the geometric mean of the values of m over Workloads.
func GeoMean(m map[string]float64) float64 {
	s := 0.0
	for _, w := range Workloads {
		s += math.Log(m[w.Name])
	}
	return math.Exp(s / float64(len(Workloads)))
}

// Gain is the efficiency gain E = sqrt(speed × memory), the geometric mean
// of all six ratios.
func Gain(speed, memory float64) float64 { return math.Sqrt(speed * memory) }

// MemorySaved is 1 - peak/bf16_peak on the first workload.
func MemorySaved(peak, bf16Peak float64) float64 { return 1 - peak/bf16Peak }

// Summary is the efficiency part of a dev score, rounded as the records
// round it (4 decimals). The means and E are computed from the unrounded
// ratios and rounded last.
type Summary struct {
	Speeds, Memories           map[string]float64
	Speed, Memory, Gain, Saved float64
	PeakGiB, BF16PeakGiB       float64
}

// Summarize computes a Summary from raw rates and peaks.
func Summarize(rate, bf16Rate, peak, bf16Peak map[string]float64) (Summary, error) {
	sp, err := Speeds(rate, bf16Rate)
	if err != nil {
		return Summary{}, err
	}
	mem, err := Memories(peak, bf16Peak)
	if err != nil {
		return Summary{}, err
	}
	speed, memory := GeoMean(sp), GeoMean(mem)
	s := Summary{Speeds: map[string]float64{}, Memories: map[string]float64{},
		Speed: Round(speed, 4), Memory: Round(memory, 4), Gain: Round(Gain(speed, memory), 4),
		Saved: Round(MemorySaved(peak[First], bf16Peak[First]), 4), PeakGiB: peak[First], BF16PeakGiB: bf16Peak[First]}
	for k := range sp {
		s.Speeds[k], s.Memories[k] = Round(sp[k], 4), Round(mem[k], 4)
	}
	return s, nil
}

// GiB is 2^30 bytes.
const GiB = float64(1 << 30)

// Peak is one workload's peak memory, split as the records split it.
type Peak struct {
	WeightsGiB, KVGiB, OtherGiB float64
	// PoolGiB is the engine's KV cache pool (engine.startup.kv_cache_gib).
	PoolGiB float64
	// ResidentTokens is how many tokens the KV held at the peak.
	ResidentTokens float64
}

// PeakGiB is weights + kv + other, each rounded to 3 decimals first.
func (p Peak) PeakGiB() float64 {
	return Round(Round(p.WeightsGiB, 3)+Round(p.KVGiB, 3)+Round(p.OtherGiB, 3), 3)
}

// KVUsage is kv_gib / kv_cache_gib, 4 decimals.
func (p Peak) KVUsage() float64 {
	if p.PoolGiB <= 0 {
		return 0
	}
	return Round(p.KVGiB/p.PoolGiB, 4)
}

// KVBytesPerToken is kv bytes / resident tokens (0 without tokens).
func (p Peak) KVBytesPerToken() float64 {
	if p.ResidentTokens <= 0 {
		return 0
	}
	return math.Round(p.KVGiB * GiB / p.ResidentTokens)
}

// StoredGiB is the checkpoint's safetensors bytes in GiB, 3 decimals.
func StoredGiB(bytes int64) float64 { return Round(float64(bytes)/GiB, 3) }

// StartupKVBytesPerToken is kv_cache_gib × 2^30 / kv_cache_tokens.
func StartupKVBytesPerToken(poolGiB, tokens float64) float64 { return poolGiB * GiB / tokens }

// MaxSequences is how many requests of tokensPerRequest fit in the pool, 2
// decimals.
func MaxSequences(poolTokens, tokensPerRequest float64) float64 {
	return Round(poolTokens/tokensPerRequest, 2)
}

// BudgetFactor is the budget replay's allowance over the measured peak.
const BudgetFactor = 1.02

// CUDAContextGiB is the room left above the budget for the CUDA context.
const CUDAContextGiB = 4.0

// KeepRate is the share of its rate an engine must keep under its budget.
const KeepRate = 0.9

// Budget is the limit a workload is replayed under.
type Budget struct {
	Factor, BudgetGiB, CapGiB float64
}

// BudgetFor returns round(factor × peak, 3) and the cap 4 GiB above it.
func BudgetFor(peakGiB, factor float64) Budget {
	b := Round(factor*peakGiB, 3)
	return Budget{Factor: factor, BudgetGiB: b, CapGiB: Round(b+CUDAContextGiB, 3)}
}

// Replay is what the engine did under its budget.
type Replay struct {
	// Running is how many requests it held at once; Full how many the
	// workload offers.
	Running, Full float64
	// Rate is its output tokens per second, nil when it did not finish.
	Rate *float64
	// Upper is the upper end of the one-sided 95% confidence interval
	// of the share of its rate it kept over interleaved pairs
	// (KeptBound); 0 where one replay decided (then Kept compares Rate
	// with the unconstrained rate).
	Upper float64
}

// Held reports whether the engine held every request at once.
func (r Replay) Held() bool { return r.Running == r.Full }

// Kept reports whether it kept KeepRate of its unconstrained rate: where
// interleaved pairs judged it, unless they say beyond their noise that
// it kept less (Upper below KeepRate); else its rate against rate.
func (r Replay) Kept(rate float64) bool {
	switch {
	case r.Rate == nil:
		return false
	case r.Upper > 0:
		return r.Upper >= KeepRate
	}
	return *r.Rate >= KeepRate*rate
}

// Healthy is the budget verdict: held and kept.
func (r Replay) Healthy(rate float64) bool { return r.Held() && r.Kept(rate) }

// Reason is the sentence of a failed budget, in the records' form.
func Reason(workload string, b Budget, r Replay, rate float64) string {
	var what string
	held, kept := r.Held(), r.Kept(rate)
	switch {
	case !held && !kept:
		what = "the engine neither held its requests at once nor kept 90% of its rate"
	case !held:
		what = "the engine did not hold its requests at once"
	case !kept:
		what = "the engine did not keep 90% of its rate"
	default:
		return ""
	}
	return fmt.Sprintf("contract: limited to a hard cap of its %s peak plus %d%% (%.3f GiB with room for its CUDA context), %s",
		workload, int(math.Round((b.Factor-1)*100)), b.CapGiB, what)
}

// KeepPairs is how many pairs judge a budget replay that held its
// requests but fell below KeepRate of the candidate's rate: the first
// pair (the candidate's run and the first replay) and KeepPairs-1 more,
// each the unconstrained engine on the workload and then its replay
// under the budget, run one after the other (interleaved).
const KeepPairs = 5

// KeptBound judges the rate a budget replay kept over interleaved pairs:
// ratios[i] is the i-th replay's rate over the rate of the unconstrained
// run measured just before it. It returns their geometric mean and the
// upper end of its one-sided 95% confidence interval (Student's t over
// the ratios' logarithms); ok is false under two ratios or with one that
// is not a positive number. The replay kept its rate unless upper is
// below KeepRate.
//
// Why pairs, and not requests: on a loaded machine the noise is the
// run's, not the request's. A run's requests share its moments of
// contention (those of a concurrent workload are decoded in the same
// steps), so they slow together: measured on the example FP8 checkpoint
// on a 2-core machine with four threads spinning beside it, the runs of
// one workload spread by 3% (long_context) to 9% (serve), while the
// ratios of one replay's requests to the same requests unconstrained
// spread by 0.3% to 9% about a shift they share. A bound over one
// replay's requests failed as many honest replays as the ratio of the
// totals (4 and 5 of 65). Pairs of runs side by side, several of them,
// sample the run's noise itself, while an engine that slows under its
// cap does so in every pair.
func KeptBound(ratios []float64) (ratio, upper float64, ok bool) {
	n := len(ratios)
	if n < 2 {
		return 0, 0, false
	}
	logs := make([]float64, n)
	mean := 0.0
	for i, x := range ratios {
		if !(x > 0) || math.IsInf(x, 0) {
			return 0, 0, false
		}
		logs[i] = math.Log(x)
		mean += logs[i]
	}
	mean /= float64(n)
	ss := 0.0
	for _, x := range logs {
		ss += (x - mean) * (x - mean)
	}
	se := math.Sqrt(ss/float64(n-1)) / math.Sqrt(float64(n))
	return math.Exp(mean), math.Exp(mean + tOneSided95(n-1)*se), true
}

// tOneSided95 is Student's t quantile at 0.95 with df degrees of freedom
// (df ≥ 1), the normal's 1.645 beyond 120.
func tOneSided95(df int) float64 {
	table := []float64{6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
		1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
		1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697}
	switch {
	case df < 1:
		return math.Inf(1)
	case df <= len(table):
		return table[df-1]
	case df <= 40:
		return 1.684
	case df <= 60:
		return 1.671
	case df <= 120:
		return 1.658
	}
	return 1.645
}
