package campaign

// EngineSpec is how a campaign serves its checkpoints: the command
// template (placeholders {{.Checkpoint}} {{.Port}} {{.KVCacheDType}}
// {{.MaxNumSeqs}} {{.MaxModelLen}} {{.GPUMemoryGiB}} {{.KVCacheBytes}}
// {{.MemFractionStatic}}; see the runner's engine.Params) and its
// settings.
type EngineSpec struct {
	Command    string `json:"command"`
	MaxNumSeqs int    `json:"max_num_seqs,omitempty"`
	// MaxModelLen is the context the engine serves in the measured runs
	// (vLLM's --max-model-len, SGLang's --context-length): at least the
	// longest workload request, at most the model's own; 0 leaves the
	// engine the model's own. A budget replay serves its workload's own
	// longest request instead.
	MaxModelLen int `json:"max_model_len,omitempty"`
}

// WorkloadSpec sizes the three workloads of an efficiency job.
type WorkloadSpec struct {
	// RequestsPerSlot is how many requests each concurrent slot sends.
	RequestsPerSlot int `json:"requests_per_slot"`
	// MaxTokens is each request's output length.
	MaxTokens int `json:"max_tokens"`
	// PromptWords and LongPromptWords size the prompts of serve and
	// interactive, and of long_context (0: the load generator's defaults).
	PromptWords     int `json:"prompt_words,omitempty"`
	LongPromptWords int `json:"long_prompt_words,omitempty"`
}

// Sampling is the campaign's fixed generation settings.
type Sampling struct {
	Temperature float64 `json:"temperature"`
	// Samples per item, unless the item says otherwise.
	Samples int `json:"samples"`
	// MaxTokens per generation, unless the item says otherwise.
	MaxTokens int `json:"max_tokens"`
	// TopLogprobs is k of the top-k logprobs kept for the KL, on the
	// first KLSequences items.
	TopLogprobs int `json:"top_logprobs"`
	KLSequences int `json:"kl_sequences"`
	// Concurrency is how many generations are in flight at once.
	Concurrency int `json:"concurrency"`
}
