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
	// Source pins the engine's source tree for the engine track: a
	// participant's patch is checked and applied against it, and the
	// patched engine built from it. Nil: the campaign takes no patches.
	Source *EngineSource `json:"source,omitempty"`
}

// Kinds of engine source: how a patched tree becomes an engine.
const (
	// SourceGo is a Go module compiled offline by Build (simengine).
	SourceGo = "go"
	// SourcePython is a Python package whose patched files are laid
	// over the package installed in the runner's image (vLLM, SGLang):
	// nothing is compiled unless Build says so.
	SourcePython = "python"
)

// EngineSource is the engine's source tree at a pinned revision, shipped
// in the campaign's own folder (and so in its versioned bundle in the
// arena's store), with the rules a patch against it must keep.
type EngineSource struct {
	// Dir is the source tree's folder inside the campaign folder.
	Dir string `json:"dir"`
	// Revision names the pinned revision for people ("vllm 0.13.0",
	// "simengine <digest>"); the tree's digest is what pins it.
	Revision string `json:"revision"`
	// Kind is SourceGo or SourcePython.
	Kind string `json:"kind"`
	// Build is the command that builds the patched tree, run in it,
	// offline, inside the sandbox; {{.Out}} is where the engine goes.
	// Empty for a pure Python package.
	Build string `json:"build,omitempty"`
	// InstallDir is, for SourcePython, where the runner image installed
	// the package that the patched files are laid over.
	InstallDir string `json:"install_dir,omitempty"`
	// Allow are the paths (globs relative to Dir, path.Match syntax,
	// "dir/**" for a whole folder) a patch may touch.
	Allow []string `json:"allow"`
	// MaxPatchBytes bounds a patch's size.
	MaxPatchBytes int64 `json:"max_patch_bytes"`
	// AllowBuildScripts lets a patch change the build's own files
	// (go.mod, go.sum, setup.py, pyproject.toml, CMakeLists.txt,
	// Makefile, *.sh); refused by default.
	AllowBuildScripts bool `json:"allow_build_scripts,omitempty"`
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
