// Package examples generates small, real example checkpoints of a tiny
// Qwen3 model, and the campaign they are checked against.
//
// The source model is a Qwen3ForCausalLM of vocabulary 2048, hidden size
// 256, intermediate size 768, two layers and four attention heads over two
// KV heads of width 64, with BF16 weights drawn deterministically (N(0,
// 0.02²), norms 1.0). The quantized examples really quantize its linear
// layers (lm_head stays BF16, in the quantization config's ignore list) in
// the layouts of compressed-tensors: FP8 per channel with dynamic per-token
// activations, int4 group 32 packed in int32, and NVFP4. The dishonest
// examples each break one rule of the contract, so the arena has to refuse
// each for its own reason.
//
// Write lays them out as an arena expects them:
//
//	<dir>/campaigns/qwen3-tiny/{campaign.json, config.json, tensors.json, engine-src/ (simengine's pinned source, see EngineSource)}
//	<dir>/submissions/<name>/{submission.json, config.json, *.safetensors, tokenizer files}
package examples

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// TaskID is the campaign's task id.
const TaskID = "qwen3-tiny"

// Folders under the directory Write writes to.
const (
	CampaignsDir   = "campaigns"
	SubmissionsDir = "submissions"
)

// Example is one generated submission bundle and what the contract must
// find in it.
type Example struct {
	// Name is the bundle's folder name, e.g. "nvfp4-w4a4".
	Name string
	// Dir is the absolute path of the bundle folder.
	Dir string
	// Declared is the precision label the bundle declares.
	Declared string
	// Honest reports whether the contract should pass.
	Honest bool
	// Detected is the precision label the contract must detect.
	Detected string
	// Violations are the violation codes the contract must report, sorted;
	// empty for an honest example.
	Violations []string
	// About says in one sentence what the example is and why it should pass
	// or be refused.
	About string
	// Audit is the reason code of the engine audit that must disqualify
	// the example ("" for none): its checkpoint keeps its contract, its
	// engine patch makes the engine cheat when it is measured.
	Audit string
	// Patch names the EnginePatch whose diff is the bundle's engine patch
	// (PatchFile), "" for no patch. The runner builds the patched engine
	// from the campaign's pinned source and runs it, so what the engine
	// does is the patch's code alone.
	Patch string
}

// PatchFile is the engine patch of the examples that carry one.
const PatchFile = "engine.patch"

// spec describes one example before it is written.
type spec struct {
	Example
	form     form
	qc       map[string]any // quantization_config, nil for none
	override map[string]any // config.json keys to change
	kvDType  string         // engine kv_cache_dtype
	method   string         // solution.method
	extra    func() []safetensors.Tensor
	sharded  bool
}

// specs are the examples in the order Write returns them.
func specs() []spec {
	return []spec{
		{
			Example: Example{Name: "bf16-reference", Declared: "W16A16KV16", Honest: true, Detected: "W16A16KV16",
				About: "The BF16 source model itself with a BF16 KV cache; it declares W16A16KV16 and is exactly that, so it passes."},
			form: formBF16, kvDType: "auto", method: "BF16 reference, unquantized",
		},
		{
			Example: Example{Name: "fp8-w8a8", Declared: "W8A8KV8", Honest: true, Detected: "W8A8KV8",
				About: "FP8 E4M3 weights per output channel with dynamic per-token FP8 activations and an FP8 KV cache, in two shards; it is the W8A8KV8 it declares, so it passes."},
			form: formFP8, qc: fp8Config(), kvDType: "fp8", method: "FP8-W8A8 per-channel weights, dynamic per-token activations", sharded: true,
		},
		{
			Example: Example{Name: "int4-w4a16-g32", Declared: "W4A16KV8", Honest: true, Detected: "W4A16KV8",
				About: "Symmetric int4 weights in groups of 32 (compressed-tensors pack-quantized) with BF16 activations and an FP8 KV cache; it is the W4A16KV8 it declares, so it passes."},
			form: formInt4, qc: int4Config(), kvDType: "fp8", method: "INT4-W4A16 symmetric group 32, round to nearest",
		},
		{
			Example: Example{Name: "nvfp4-w4a4", Declared: "W4A4KV8", Honest: true, Detected: "W4A4KV8",
				About: "NVFP4 weights and activations (FP4 E2M1 with FP8 scales per 16 and a global scale) and an FP8 KV cache; it is the W4A4KV8 it declares, so it passes."},
			form: formNVFP4, qc: nvfp4Config(), kvDType: "fp8", method: "NVFP4-W4A4 compressed-tensors",
		},
		patched("engine-async-scheduling", "async-scheduling",
			"The FP8 checkpoint with an engine patch that schedules the next step while the device runs this one, so a step takes the longer of the device's time and the scheduler's overhead, not their sum; the answers are the unpatched engine's, so it passes every audit and is measured at its own, higher speed."),
		patched("engine-fast-path", "fast-path-under-load",
			"The FP8 checkpoint with an engine patch that takes a damaged fast path once four or more requests run, so it answers the eval items mixed into the load worse than in the quality job and is disqualified by the accuracy-under-load audit."),
		patched("engine-answer-cache", "answer-cache",
			"The FP8 checkpoint with an engine patch that replays the recorded stream of a request it has answered before, so repeated prompts decode at once and it is disqualified by the cache-defeating audit."),
		patched("engine-padded-tokens", "pad-tokens",
			"The FP8 checkpoint with an engine patch that claims half as many completion tokens again in a stream's usage as it streamed, so its text re-tokenises to fewer tokens than it claims and it is disqualified by the token-honesty audit."),
		patched("engine-other-model", "other-model-for-load",
			"The FP8 checkpoint with an engine patch that serves the load from another, smaller model while /v1/models names the checkpoint, so its first answers are not the quality job's and it is disqualified by the served-model audit."),
		patched("engine-other-model-always", "other-model-always",
			"The FP8 checkpoint with an engine patch that serves every request, the quality job's too, from another, smaller model, so only the unpatched engine's answers to the probes differ from its own and it is disqualified by the served-model audit."),
		patched("engine-route-by-shape", "route-by-shape",
			"The FP8 checkpoint with an engine patch that sends prompts shaped like the load's documents down a damaged fast path and the rest down the honest one, so its answers to the sampled load differ from the unpatched engine's and it is disqualified by the accuracy-under-load audit."),
		{
			Example: Example{Name: "bf16-declared-w4", Declared: "W4A16KV8", Honest: false, Detected: "W16A16KV8",
				Violations: []string{string(reason.PrecisionWiderThanDeclared)},
				About:      "Its config.json claims the int4 pack-quantized scheme but its tensors are the plain BF16 source, so it reads W16 and is refused as wider than the W4A16KV8 it declares."},
			form: formBF16, qc: int4Config(), kvDType: "fp8", method: "INT4-W4A16 symmetric group 32",
		},
		{
			Example: Example{Name: "foreign-tensors", Declared: "W4A16KV8", Honest: false, Detected: "W4A16KV8",
				Violations: []string{string(reason.ForeignTensors)},
				About:      "The int4 checkpoint plus a LoRA adapter on layer 0's MLP that the source model does not have, about 1% of its tensor bytes, so it is refused for foreign tensors."},
			form: formInt4, qc: int4Config(), kvDType: "fp8", method: "INT4-W4A16 symmetric group 32 with a LoRA adapter", extra: adapter,
		},
		{
			Example: Example{Name: "rope-theta-changed", Declared: "W4A16KV8", Honest: false, Detected: "W4A16KV8",
				Violations: []string{string(reason.RopeChanged)},
				About:      "The int4 checkpoint with rope_theta raised from 1000000 to 4000000 in its config.json, which changes the model, so it is refused for a changed rope."},
			form: formInt4, qc: int4Config(), override: map[string]any{"rope_theta": 4000000}, kvDType: "fp8",
			method: "INT4-W4A16 symmetric group 32, longer rope",
		},
		{
			Example: Example{Name: "kv4-declared-engine-kv8", Declared: "W4A16KV4", Honest: false, Detected: "W4A16KV8",
				Violations: []string{string(reason.PrecisionWiderThanDeclared)},
				About:      "The int4 checkpoint declaring a 4-bit KV cache while its engine runs an FP8 one, so it reads KV8 and is refused as wider than the W4A16KV4 it declares."},
			form: formInt4, qc: int4Config(), kvDType: "fp8", method: "INT4-W4A16 symmetric group 32, KV4",
		},
	}
}

// patched is the honest FP8 checkpoint with one of EnginePatches as its
// engine patch: its contract holds, and the audit the patch names (none
// for an honest patch) must disqualify it. An unknown patch name is a
// programming error of this table and panics.
func patched(name, patch, about string) spec {
	i := slices.IndexFunc(enginePatches, func(p EnginePatch) bool { return p.Name == patch })
	if i < 0 {
		panic("examples: no engine patch " + patch)
	}
	return spec{
		Example: Example{Name: name, Declared: "W8A8KV8", Honest: true, Detected: "W8A8KV8", About: about,
			Audit: enginePatches[i].Audit, Patch: patch},
		form: formFP8, qc: fp8Config(), kvDType: "fp8", sharded: true,
		method: "FP8-W8A8 per-channel weights, dynamic per-token activations, patched engine (" + patch + ")",
	}
}

// patchDiff is the diff of the EnginePatch named name.
func patchDiff(name string) ([]byte, error) {
	patches, err := EnginePatches()
	if err != nil {
		return nil, err
	}
	for _, p := range patches {
		if p.Name == name {
			return p.Diff, nil
		}
	}
	return nil, fmt.Errorf("examples: no engine patch %q", name)
}

// quantArgs is a compressed-tensors QuantizationArgs object.
func quantArgs(bits int, typ, strategy string, groupSize any, dynamic any, observer any) map[string]any {
	return map[string]any{
		"num_bits": bits, "type": typ, "strategy": strategy, "group_size": groupSize, "symmetric": true,
		"dynamic": dynamic, "actorder": nil, "block_structure": nil, "observer": observer, "observer_kwargs": map[string]any{},
	}
}

// ctConfig is a compressed-tensors quantization_config with one group
// targeting every Linear, lm_head ignored.
func ctConfig(format string, weights, acts map[string]any) map[string]any {
	var a any
	if acts != nil {
		a = acts
	}
	return map[string]any{
		"quant_method": "compressed-tensors", "format": format, "quantization_status": "compressed", "version": "0.10.2",
		"config_groups": map[string]any{"group_0": map[string]any{
			"targets": []string{"Linear"}, "weights": weights, "input_activations": a, "output_activations": nil, "format": format,
		}},
		"ignore": []string{"lm_head"}, "kv_cache_scheme": nil, "sparsity_config": map[string]any{}, "transform_config": map[string]any{},
		"global_compression_ratio": nil,
	}
}

func fp8Config() map[string]any {
	return ctConfig("float-quantized",
		quantArgs(8, "float", "channel", nil, false, "minmax"),
		quantArgs(8, "float", "token", nil, true, nil))
}

func int4Config() map[string]any {
	return ctConfig("pack-quantized", quantArgs(4, "int", "group", int4Group, false, "minmax"), nil)
}

func nvfp4Config() map[string]any {
	return ctConfig("nvfp4-pack-quantized",
		quantArgs(4, "float", "tensor_group", nvfp4Group, false, "minmax"),
		quantArgs(4, "float", "tensor_group", nvfp4Group, "local", "minmax"))
}

// Special tokens of the tiny tokenizer, at the top of the vocabulary.
const (
	endOfTextID = vocabSize - 3
	imStartID   = vocabSize - 2
	imEndID     = vocabSize - 1
)

// sourceConfig is the BF16 source model's config.json.
func sourceConfig() map[string]any {
	return map[string]any{
		"architectures":           []string{"Qwen3ForCausalLM"},
		"attention_bias":          false,
		"attention_dropout":       0.0,
		"bos_token_id":            endOfTextID,
		"eos_token_id":            imEndID,
		"head_dim":                headDim,
		"hidden_act":              "silu",
		"hidden_size":             hiddenSize,
		"initializer_range":       initStd,
		"intermediate_size":       interSize,
		"max_position_embeddings": maxPositions,
		"max_window_layers":       numLayers,
		"model_type":              "qwen3",
		"num_attention_heads":     numHeads,
		"num_hidden_layers":       numLayers,
		"num_key_value_heads":     numKVHeads,
		"rms_norm_eps":            1e-6,
		"rope_scaling":            nil,
		"rope_theta":              ropeTheta,
		"sliding_window":          nil,
		"tie_word_embeddings":     false,
		"torch_dtype":             "bfloat16",
		"transformers_version":    "4.51.3",
		"use_cache":               true,
		"use_sliding_window":      false,
		"vocab_size":              vocabSize,
	}
}

// jsonBytes encodes v indented, keys sorted, with a final newline.
func jsonBytes(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("examples: encoding JSON: %w", err)
	}
	return b.Bytes(), nil
}

// Write writes the campaign under dir/campaigns/<TaskID>/ and every example
// bundle under dir/submissions/<Name>/, deterministically (the same bytes
// every run), and returns the examples in a fixed order. It replaces those
// folders when they exist and leaves everything else under dir alone.
func Write(dir string) ([]Example, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("examples: %w", err)
	}
	m := newModel()
	campDir := filepath.Join(abs, CampaignsDir, TaskID)
	if err := writeCampaign(campDir, m); err != nil {
		return nil, err
	}
	common, err := tokenizerFiles()
	if err != nil {
		return nil, err
	}
	forms := map[form][]safetensors.Tensor{formBF16: m.checkpoint(formBF16)}
	if err := writeReference(filepath.Join(campDir, "reference"), forms[formBF16], common); err != nil {
		return nil, err
	}
	var out []Example
	for _, s := range specs() {
		if forms[s.form] == nil {
			forms[s.form] = m.checkpoint(s.form)
		}
		ex := s.Example
		ex.Dir = filepath.Join(abs, SubmissionsDir, s.Name)
		if ex.Violations == nil {
			ex.Violations = []string{}
		}
		tensors := slices.Clone(forms[s.form])
		if s.extra != nil {
			tensors = append(tensors, s.extra()...)
		}
		if err := writeBundle(ex.Dir, s, tensors, common); err != nil {
			return nil, err
		}
		out = append(out, ex)
	}
	return out, nil
}

// SourceShapes is the full-size model the tiny example stands in for,
// Qwen3-8B, as its config.json gives its shapes, in the inline form of
// simengine's --source-config. The campaign names it in its engine
// command, so it travels with every job to whichever runner serves it.
const SourceShapes = "hidden_size=4096,num_hidden_layers=36,num_attention_heads=32,num_key_value_heads=8,head_dim=128," +
	"intermediate_size=12288,vocab_size=151936,tie_word_embeddings=false,max_position_embeddings=40960"

// EngineCommand is the example campaign's engine: the simulated engine,
// serving each 5 MB checkpoint as full-size Qwen3-8B (SourceShapes) on a
// simulated H200: every tensor role (embeddings, lm_head, attention and
// MLP projections, norms) takes Qwen3-8B's shapes at the bytes per
// parameter the submitted checkpoint stores that role in, and the KV cache
// Qwen3-8B's 36 layers of 8 KV heads of 128. A candidate with an engine
// patch runs its patched simengine, built by the runner from the pinned
// source (engine-src) and named by {{.Engine}}; every other run, the
// BF16 reference's among them, runs simengine itself.
const EngineCommand = "{{if .Engine}}{{.Engine}}{{else}}simengine{{end}} --checkpoint {{.Checkpoint}} --port {{.Port}} --kv-cache-dtype {{.KVCacheDType}} " +
	"--max-num-seqs {{.MaxNumSeqs}} --gpu-memory-gib {{.GPUMemoryGiB}} --source-config " + SourceShapes + " --startup-seconds 0.5"

// VLLMEngineCommand is the campaign engine to serve the checkpoints with
// vLLM on a GPU (flags as vllm/engine/arg_utils.py and the CacheConfig it
// reads define them): vLLM reads the quantization from the checkpoint's
// config.json (quantization_config: compressed-tensors, modelopt, fp8,
// gptq, awq), so no --quantization forces one method on every
// submission; --kv-cache-dtype takes the declared KV dtype in vLLM's
// names (auto, fp8, nvfp4, ...); --max-model-len is the campaign's
// context (the budget replay's: its workload's longest request); prefix
// caching is off so repeated prompts are measured, not served from cache.
// The budget replay bounds the KV pool in bytes with
// --kv-cache-memory-bytes (which makes vLLM ignore
// --gpu-memory-utilization): the budget less the weights and the other
// memory the candidate's run measured (formula.SizeReplay). A fraction of
// the device cannot say the budget: vLLM takes activations and its
// CUDA-graph estimate out of that fraction and then refuses to start
// unless the rest holds one request of max_model_len.
const VLLMEngineCommand = "vllm serve {{.Checkpoint}} --host 127.0.0.1 --port {{.Port}} --dtype auto " +
	"--kv-cache-dtype {{vllmKV .KVCacheDType}} --max-num-seqs {{.MaxNumSeqs}}{{if .MaxModelLen}} --max-model-len {{.MaxModelLen}}{{end}} --no-enable-prefix-caching" +
	"{{if .KVCacheBytes}} --kv-cache-memory-bytes {{.KVCacheBytes}}{{end}}"

// SGLangEngineCommand is the campaign engine to serve the checkpoints with
// SGLang (flags as python/sglang/srt/server_args.py defines them): it too
// reads the quantization from config.json; --kv-cache-dtype in SGLang's
// names (fp8_e4m3 for fp8); --context-length the campaign's context (the
// budget replay's: its workload's longest request); the radix (prefix)
// cache off; --enable-metrics for /metrics, which the runner reads the KV
// cache in use from, with --decode-log-interval 1 so SGLang sets those
// gauges at every decode step (by default every 40th). The budget replay
// sets --mem-fraction-static to the weights and the allowed pool over the
// memory free before loading, as SGLang sizes its pool (free × fraction −
// weights); the CUDA graphs and activations come out of the rest, inside
// the cap's 4 GiB.
const SGLangEngineCommand = "python3 -m sglang.launch_server --model-path {{.Checkpoint}} --host 127.0.0.1 --port {{.Port}} " +
	"--kv-cache-dtype {{sglangKV .KVCacheDType}} --max-running-requests {{.MaxNumSeqs}}{{if .MaxModelLen}} --context-length {{.MaxModelLen}}{{end}} " +
	"--disable-radix-cache --enable-metrics --decode-log-interval 1{{if .MemFractionStatic}} --mem-fraction-static {{.MemFractionStatic}}{{end}}"

// EngineMaxModelLen is the context the example's real-engine blocks
// serve: the example's longest request (a 1,024-word long_context prompt
// and 64 tokens out) with room to spare, well inside Qwen3-8B's 40,960.
const EngineMaxModelLen = 4096

// EnginesDir is the folder of a campaign, beside campaign.json, holding
// the engine blocks an operator can switch the campaign to.
const EnginesDir = "engines"

// enginesReadme says how to switch.
const enginesReadme = `# Engines for this campaign

campaign.json's "engine" block runs simengine, the simulated engine, so the
arena runs on a machine without a GPU. On a GPU, replace that block with
one of these (each file is {"engine": {...}}):

    jq -s '.[0] * .[1]' campaign.json engines/vllm.json > c && mv c campaign.json
    jq -s '.[0] * .[1]' campaign.json engines/sglang.json > c && mv c campaign.json

- vllm.json: vllm serve; health at /health, KV cache in use from its
  /metrics (vllm:kv_cache_usage_perc), start-up from its log; the budget
  replay bounds its KV pool with --kv-cache-memory-bytes.
- sglang.json: python3 -m sglang.launch_server with --enable-metrics and
  --decode-log-interval 1; health at /health_generate (a one-token
  generation), KV cache in use from sglang:token_usage, start-up from its
  log; the budget replay bounds its pool with --mem-fraction-static.

max_model_len is the context both serve (--max-model-len,
--context-length): at least the campaign's longest request, at most the
model's own (the runner refuses a longer one with engine_context_too_long).

Placeholders: {{.Checkpoint}} {{.Port}} {{.KVCacheDType}} {{.MaxNumSeqs}}
{{.MaxModelLen}} (the campaign's, or the replayed workload's longest
request), {{.KVCacheBytes}} and {{.MemFractionStatic}} (the budget
replay's pool in bytes and as SGLang's fraction; 0 outside the replay,
hence the {{if}}), {{.GPUMemoryGiB}} {{.GPUMemoryFraction}}
{{.GPUMemoryBytes}} (the whole budget), and vllmKV and sglangKV, which
name the declared KV dtype as each engine does. The runner counts the
engine's memory as the device does (NVML's used memory over the baseline
before the engine started) and reads its KV cache in use from /metrics,
and the record says so (peak_memory.source). A runner without NVML
refuses these engines (no_gpu_telemetry).
`

// writeReference writes the campaign's BF16 reference checkpoint: the
// source model's config and weights, as served.
func writeReference(dir string, tensors []safetensors.Tensor, common map[string][]byte) error {
	if err := resetDir(dir); err != nil {
		return err
	}
	cfg, err := jsonBytes(sourceConfig())
	if err != nil {
		return err
	}
	files := maps.Clone(common)
	files["config.json"] = cfg
	if err := writeFiles(dir, files); err != nil {
		return err
	}
	return writeShard(filepath.Join(dir, "model.safetensors"), tensors)
}

// resetDir removes a folder of Write's and creates it empty.
func resetDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("examples: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("examples: %w", err)
	}
	return nil
}

func writeFiles(dir string, files map[string][]byte) error {
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return fmt.Errorf("examples: %w", err)
		}
	}
	return nil
}

func writeCampaign(dir string, m *model) error {
	if err := resetDir(dir); err != nil {
		return err
	}
	src, err := EngineSource()
	if err != nil {
		return err
	}
	if _, err := WriteEngineSource(filepath.Join(dir, src.Dir)); err != nil {
		return err
	}
	meta, err := jsonBytes(map[string]any{
		"task_id": TaskID,
		"name":    "Qwen3 tiny (2 layers, hidden 256): example campaign",
		"family":  "qwen3",
		"policy":  map[string]any{"allow_sparse": false, "foreign_share_limit": analyze.DefaultForeignShareLimit},
		"engine": map[string]any{
			"command":      EngineCommand,
			"max_num_seqs": 256,
			"source":       src,
		},
		"efficiency": map[string]any{
			"requests_per_slot": 1, "max_tokens": 64, "prompt_words": 128, "long_prompt_words": 1024, "budget_factor": 1.02,
		},
		"reference": "reference",
		"quality": map[string]any{
			"suite": "suite-dev", "ranked_suite": "suite-ranked",
			"sampling": map[string]any{"temperature": 0, "samples": 2, "max_tokens": 64, "top_logprobs": 5, "kl_sequences": 16, "concurrency": 32},
		},
	})
	if err != nil {
		return err
	}
	cfg, err := jsonBytes(sourceConfig())
	if err != nil {
		return err
	}
	idx := analyze.TensorIndex{Tensors: map[string]analyze.SourceTensor{}}
	for _, t := range m.tensors {
		idx.Tensors[t.name] = analyze.SourceTensor{DType: string(safetensors.BF16), Shape: t.shape}
	}
	tensors, err := jsonBytes(idx)
	if err != nil {
		return err
	}
	if err := writeFiles(dir, map[string][]byte{"campaign.json": meta, "config.json": cfg, "tensors.json": tensors}); err != nil {
		return err
	}
	return writeEngines(filepath.Join(dir, EnginesDir))
}

// writeEngines writes the engine blocks an operator can switch the
// campaign to, and how.
func writeEngines(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("examples: %w", err)
	}
	files := map[string][]byte{"README.md": []byte(enginesReadme)}
	for name, cmd := range map[string]string{"vllm.json": VLLMEngineCommand, "sglang.json": SGLangEngineCommand} {
		b, err := jsonBytes(map[string]any{"engine": map[string]any{"command": cmd, "max_num_seqs": 256, "max_model_len": EngineMaxModelLen}})
		if err != nil {
			return err
		}
		files[name] = b
	}
	return writeFiles(dir, files)
}

func writeBundle(dir string, s spec, tensors []safetensors.Tensor, common map[string][]byte) error {
	if err := resetDir(dir); err != nil {
		return err
	}
	cfg := sourceConfig()
	if s.qc != nil {
		cfg["quantization_config"] = s.qc
	}
	maps.Copy(cfg, s.override)
	cfgBytes, err := jsonBytes(cfg)
	if err != nil {
		return err
	}
	decl := bundle.Declaration{
		TaskID: TaskID, Split: "dev", Participant: "example-team", Agent: "example-agent", Track: "engine",
		Solution: bundle.Solution{Checkpoint: "qwen3-tiny-" + s.Name, Method: s.method, Precision: s.Declared},
		Engine: &bundle.Engine{
			Command:      "simengine --checkpoint {{.Checkpoint}} --port {{.Port}} --kv-cache-dtype {{.KVCacheDType}}",
			KVCacheDType: s.kvDType,
		},
	}
	if s.Patch != "" {
		decl.Engine.Patch = PatchFile
	}
	if err := decl.Validate(); err != nil {
		return fmt.Errorf("examples: %s: %w", s.Name, err)
	}
	declBytes, err := jsonBytes(decl)
	if err != nil {
		return err
	}
	files := maps.Clone(common)
	files["config.json"] = cfgBytes
	files[bundle.DeclarationFile] = declBytes
	if s.Patch != "" {
		if files[PatchFile], err = patchDiff(s.Patch); err != nil {
			return err
		}
	}
	if err := writeFiles(dir, files); err != nil {
		return err
	}
	if !s.sharded {
		return writeShard(filepath.Join(dir, "model.safetensors"), tensors)
	}
	return writeSharded(dir, tensors)
}

// writeShard writes one safetensors file.
func writeShard(path string, tensors []safetensors.Tensor) error {
	w := safetensors.Writer{Metadata: map[string]string{"format": "pt"}}
	for _, t := range tensors {
		if err := w.Add(t); err != nil {
			return fmt.Errorf("examples: %s: %w", filepath.Base(path), err)
		}
	}
	if _, err := w.WriteFile(path); err != nil {
		return fmt.Errorf("examples: %w", err)
	}
	return nil
}

// writeSharded writes two shards, the embedding and layer 0 in the first
// and the rest in the second, and model.safetensors.index.json.
func writeSharded(dir string, tensors []safetensors.Tensor) error {
	const first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	shards := map[string][]safetensors.Tensor{}
	weightMap := map[string]string{}
	var total int64
	for _, t := range tensors {
		shard := second
		if strings.HasPrefix(t.Name, "model.embed_tokens.") || strings.HasPrefix(t.Name, "model.layers.0.") {
			shard = first
		}
		shards[shard] = append(shards[shard], t)
		weightMap[t.Name] = shard
		total += int64(len(t.Data))
	}
	for _, name := range []string{first, second} {
		if err := writeShard(filepath.Join(dir, name), shards[name]); err != nil {
			return err
		}
	}
	idx, err := jsonBytes(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap})
	if err != nil {
		return err
	}
	return writeFiles(dir, map[string][]byte{safetensors.IndexFile: idx})
}
