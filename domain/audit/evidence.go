package audit

import "github.com/lowbarena/lowbarena/domain/record"

// Evidence is what an engine run gathered for the audits: the raw
// answers and figures, which Judge turns into the record's audit block.
type Evidence struct {
	// Seed seeded the run's load prompts and the items' draw and places.
	Seed uint64 `json:"seed"`
	// SuiteKey names the suite the items came from (name@version/split).
	SuiteKey string `json:"suite_key"`
	// Checkpoint is the name of the folder the engine was started on;
	// ServedModel the id its /v1/models gave.
	Checkpoint  string `json:"checkpoint"`
	ServedModel string `json:"served_model"`
	// Probes are the engine's first answers, one at a time; Items the
	// eval items it answered within the load.
	Probes []Answer `json:"probes"`
	Items  []Answer `json:"items"`
	// LoadTPOTMs is the median time per output token of the load's own
	// requests, per workload.
	LoadTPOTMs map[string]float64 `json:"load_tpot_ms"`
	Tokens     TokenCount         `json:"tokens"`
	Cache      *CacheRuns         `json:"cache,omitempty"`
	// Load is a random subset of the load's own requests (each built from
	// a suite item, Item naming it), their answers under load.
	Load []Answer `json:"load,omitempty"`
	// Unpatched is the campaign's unpatched engine's answers on the same
	// checkpoint to the probes and to Load's prompts; nil when the
	// submission does not patch the engine.
	Unpatched *UnpatchedRun `json:"unpatched,omitempty"`
	// Device is the run's figures the device audit reads; nil from a
	// runner that gathered none.
	Device *DeviceRun `json:"device,omitempty"`
}

// UnpatchedRun is the campaign's own engine (without the participant's
// patch) answering the probes and the load's sampled prompts on the same
// checkpoint, greedy, each to its end of sequence.
type UnpatchedRun struct {
	Probes []Answer `json:"probes"`
	Load   []Answer `json:"load"`
}

// DeviceRun is what the device audit reads of a measured run: the GPU,
// the bytes a decode step reads, and each workload's rates.
type DeviceRun struct {
	GPU             string           `json:"gpu"`
	WeightBytes     float64          `json:"weight_bytes"`
	KVBytesPerToken float64          `json:"kv_bytes_per_token"`
	Workloads       []DeviceWorkload `json:"workloads"`
}

// DeviceWorkload is one workload's measured rates: the most sequences
// running at once, the shortest prompt (tokens, as the engine counted
// them), the median time per output token and the aggregate rate.
type DeviceWorkload struct {
	Name         string  `json:"name"`
	Running      int     `json:"running"`
	MinPrompt    int     `json:"min_prompt_tokens"`
	TPOTMs       float64 `json:"tpot_ms"`
	Rate         float64 `json:"rate"`
	OutputTokens int     `json:"output_tokens"`
}

// Answer is one eval item's streamed answer.
type Answer struct {
	Item     string   `json:"item"`
	Workload string   `json:"workload,omitempty"`
	Seq      int      `json:"seq"`
	Chunks   []string `json:"chunks"`
	TPOTMs   float64  `json:"tpot_ms"`
	// Err is the code of a request that failed, ErrMessage how.
	Err        string `json:"error,omitempty"`
	ErrMessage string `json:"error_message,omitempty"`
}

// TokenCount is the re-tokenised count of every measured request's text
// beside the tokens the engine claimed.
type TokenCount struct {
	// Tokenizer names the tokenizer.json used ("" when none could be
	// read, then nothing was counted and Why says so).
	Tokenizer string `json:"tokenizer"`
	Why       string `json:"why,omitempty"`
	Requests  int    `json:"requests"`
	// Claimed is the completion tokens the engine reported (its chunks
	// where it reported none), Retokenized the tokenizer's count of the
	// same text.
	Claimed     int `json:"claimed"`
	Retokenized int `json:"retokenized"`
	// OverMax counts requests that claimed or held more than max_tokens;
	// EndedEarly those that ended before max_tokens although ignore_eos
	// asked for all of them.
	OverMax    int                   `json:"over_max"`
	EndedEarly int                   `json:"ended_early"`
	Worst      []record.TokenRequest `json:"worst,omitempty"`
}

// CacheRuns is one workload shape run twice on fresh prompts of the same
// shared prefix: once every prompt unique, once a few prompts repeated
// (their first sending, which primes any cache, not measured).
type CacheRuns struct {
	Concurrency int      `json:"concurrency"`
	Unique      RunTimes `json:"unique"`
	Repeat      RunTimes `json:"repeat"`
}

// RunTimes are one run's request count and medians.
type RunTimes struct {
	Requests int     `json:"requests"`
	TPOTMs   float64 `json:"tpot_ms"`
	TTFTMs   float64 `json:"ttft_ms"`
}
