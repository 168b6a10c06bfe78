package formula

import "math"

// KVBlockTokens is the granularity an engine's KV pool is handed out in:
// vLLM's default block size (16 tokens; SGLang's pages are 1 token, so
// 16 only rounds its need up).
const KVBlockTokens = 16

// ReplayInput is what a budget replay is sized from: the workload's peak
// in the candidate's unconstrained run and the device it ran on.
type ReplayInput struct {
	// BudgetGiB is round(factor × peak, 3) (BudgetFor).
	BudgetGiB float64
	// WeightsGiB and OtherGiB are the peak's weights and other memory
	// (activations, CUDA graphs, the CUDA context: what the engine holds
	// outside its KV pool).
	WeightsGiB, OtherGiB float64
	// KVBytesPerToken is the candidate's KV cache cost of one token.
	KVBytesPerToken float64
	// ContextTokens is the workload's longest request (prompt plus max
	// tokens); the replay's engine serves that context, no longer.
	ContextTokens int
	// FreeGiB is the memory free on the device before the engine loads:
	// its size less its baseline.
	FreeGiB float64
}

// ReplayTerms is a budget in the engines' own terms.
type ReplayTerms struct {
	// MaxModelLen is the context the replay's engine is started with.
	MaxModelLen int
	// KVCacheBytes is the KV pool it may allocate (vLLM's
	// --kv-cache-memory-bytes): the budget less the weights and the
	// other memory the candidate's run measured, and never less than
	// one request of MaxModelLen (the engines refuse to start with a
	// pool smaller than that).
	KVCacheBytes int64
	// MemFractionStatic is the same pool as SGLang's
	// --mem-fraction-static: SGLang sizes its pool as free-before-load
	// × fraction − weights (model_runner's profile_max_num_token), so
	// the fraction is (weights + pool) / free, rounded up to 4 places; 0
	// when the free memory is unknown.
	MemFractionStatic float64
	// Floored says the pool was raised to hold one MaxModelLen request.
	Floored bool
}

// SizeReplay sizes a budget replay. The engines bound their KV pool, not
// their instance: the weights are the checkpoint's and the other memory
// the engine's own, so what the budget leaves them to size is the pool.
// A candidate whose true peak is P (weights + KV in use + other) gets a
// pool of 1.02 P − weights − other ≥ 1.02 × its KV in use, and its
// instance is then weights + pool + other = the budget; the NVML cap, 4
// GiB above the budget, bounds whatever the engine allocates beside.
func SizeReplay(in ReplayInput) ReplayTerms {
	t := ReplayTerms{MaxModelLen: in.ContextTokens}
	pool := (in.BudgetGiB - in.WeightsGiB - in.OtherGiB) * GiB
	if in.ContextTokens > 0 && in.KVBytesPerToken > 0 {
		blocks := math.Ceil(float64(in.ContextTokens) / KVBlockTokens)
		if one := blocks * KVBlockTokens * in.KVBytesPerToken; pool < one {
			pool, t.Floored = one, true
		}
	}
	if pool <= 0 {
		return t
	}
	t.KVCacheBytes = int64(math.Ceil(pool))
	if free := in.FreeGiB * GiB; free > 0 {
		t.MemFractionStatic = math.Min(math.Ceil((in.WeightsGiB*GiB+pool)/free*1e4)/1e4, 1)
	}
	return t
}
