package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/loadgen"
)

// Refusal is a job this runner will not measure through no fault of the
// submission: its GPU is not back at its baseline, or it has no NVML and
// the campaign's engine is a real one. The runner service hands the job
// back for another try (or another runner), and fails it with Reason
// only when the tries are spent.
type Refusal struct {
	Reason  reason.Code
	Message string
}

func (r *Refusal) Error() string { return string(r.Reason) + ": " + r.Message }

// AsRefusal returns the *Refusal in err's chain, or nil.
func AsRefusal(err error) *Refusal {
	var r *Refusal
	if errors.As(err, &r) {
		return r
	}
	return nil
}

// preflight refuses, before anything starts, what no engine start could
// measure or serve:
//   - a real engine (vLLM, SGLang) on a runner without NVML: it would be
//     measured on a simulated device that reads nothing (a Refusal: the
//     pod is misconfigured, the submission is not at fault);
//   - a KV cache dtype the GPU cannot run (FP4 KV on a GPU below compute
//     capability 10.0): the engines refuse it only after loading the
//     weights, or, on some releases, fail later with text of their own;
//   - a context longer than the model's own, as vLLM's
//     _get_and_verify_max_len (vllm/config/model.py) and SGLang's
//     context_length check refuse it.
func (r *Runner) preflight(l Launch, argv []string, family engine.Family) error {
	realEngine := (family == engine.FamilyVLLM || family == engine.FamilySGLang) && filepath.Base(argv[0]) != "simengine"
	if r.NVML == nil && realEngine {
		return &Refusal{Reason: reason.NoGPUTelemetry, Message: fmt.Sprintf(
			"the campaign's engine is %s, a real engine, and this runner has no NVML (no GPU, or the container runtime did not inject libnvidia-ml.so.1: "+
				"give the runner's container the utility capability, NVIDIA_DRIVER_CAPABILITIES=compute,utility, or the nvidia runtime class); "+
				"it is not measured on a simulated device", family.Name)}
	}
	if r.NVML != nil && FP4KV(l.KVCacheDType) {
		if major, minor, ok := r.NVML.ComputeCapability(); ok && major < 10 {
			return &engine.Failure{Reason: reason.EngineKVDTypeUnsupportedOnGPU, Message: fmt.Sprintf(
				"the declared KV cache dtype %q is an FP4 cache, which needs a GPU of compute capability 10.0 or above (Blackwell); this runner's %s is %d.%d: refused before the engine started",
				l.KVCacheDType, r.NVML.GPU(), major, minor)}
		}
	}
	if l.MaxModelLen > 0 {
		own, key, err := ModelMaxLen(l.Checkpoint)
		if err != nil {
			return &engine.Failure{Reason: reason.EngineBadCheckpoint, Message: fmt.Sprintf("the checkpoint's config.json: %v", err)}
		}
		if own > 0 && l.MaxModelLen > own {
			return &engine.Failure{Reason: reason.EngineContextTooLong, Message: fmt.Sprintf(
				"the %s run needs a context of %d tokens and the model's own is %d (%s in its config.json): refused before the engine started",
				l.Run, l.MaxModelLen, own, key)}
		}
	}
	return nil
}

// FP4KV reports whether a KV cache dtype, in the arena's or an engine's
// names, is a 4-bit float cache (vLLM's nvfp4, SGLang's fp4_e2m1,
// nvfp4, fp4_mx_block16).
func FP4KV(dtype string) bool {
	d := strings.ToLower(dtype)
	return strings.Contains(d, "fp4")
}

// lengthKeys are the config.json keys a model states its context in, as
// vLLM's _get_and_verify_max_len reads them (the smallest one present
// wins).
var lengthKeys = []string{"max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length", "max_sequence_length", "max_seq_length", "seq_len"}

// ModelMaxLen is the context a checkpoint's model serves, from its
// config.json as vLLM derives it: the smallest of lengthKeys present (in
// the config or its text_config), times the RoPE scaling factor where
// rope_scaling stretches it (not for su, longrope or llama3, whose
// max_position_embeddings is already the stretched length). 0 when the
// config states none; key names what it came from.
func ModelMaxLen(dir string) (n int, key string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("job: %w", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return 0, "", fmt.Errorf("job: config.json: %w", err)
	}
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		cfg = tc
	}
	best := math.Inf(1)
	for _, k := range lengthKeys {
		if v, ok := cfg[k].(float64); ok && v > 0 && v < best {
			best, key = v, k
		}
	}
	if math.IsInf(best, 1) {
		return 0, "", nil
	}
	rs, _ := cfg["rope_scaling"].(map[string]any)
	if rs == nil {
		rs, _ = cfg["rope_parameters"].(map[string]any)
	}
	if rs != nil {
		kind, _ := rs["rope_type"].(string)
		if kind == "" {
			kind, _ = rs["type"].(string)
		}
		factor, _ := rs["factor"].(float64)
		switch {
		case kind == "su" || kind == "longrope" || kind == "llama3" || kind == "default" || factor <= 1:
		case kind == "yarn":
			if orig, ok := rs["original_max_position_embeddings"].(float64); ok && orig > 0 {
				best = orig
			}
			best *= factor
			key += " × yarn factor"
		default:
			best *= factor
			key += " × rope_scaling factor"
		}
	}
	return int(best), key, nil
}

// contextTokens is the longest request a workload made: its longest
// prompt (warm-up included), as the engine counted it, plus its max
// tokens; 0 when the engine counted no prompt.
func contextTokens(res loadgen.Result, w loadgen.Workload) int {
	if res.MaxPromptTokens == 0 {
		return 0
	}
	return res.MaxPromptTokens + w.MaxTokens
}
