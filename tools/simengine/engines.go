package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// The releases the imitations follow. The vLLM commit is the stored
// vllm/v1/worker/gpu_worker.py; its release is inferred from that file
// (it has the v0.13 workspace manager and profiler config and lacks the
// CUDA-graph memory estimate merged after v0.13). The SGLang commit is the
// stored python/sglang/srt/server_args.py (2026 main, after the "Capture
// target decode CUDA graph" log form); its release tag could not be read
// from the store. See docs/developers/imitations.md.
const (
	VLLMVersion   = "0.13.0"
	VLLMRelease   = "vLLM 0.13.0 (commit 35d5cda)"
	SGLangRelease = "SGLang main (commit 001067f)"
)

// vllmKVChoices is vLLM's CacheDType at the pinned release: no FP4 KV
// cache (NVFP4 KV arrived in v0.25), so --kv-cache-dtype nvfp4 is an
// argparse refusal on every GPU.
var vllmKVChoices = []string{"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}

// sglangKVChoices is SGLang's --kv-cache-dtype choices at the pinned
// commit.
var sglangKVChoices = []string{"auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16", "fp4_e2m1"}

// sglangQuantChoices is SGLang's QUANTIZATION_CHOICES at the pinned commit.
var sglangQuantChoices = []string{"awq", "fp8", "mxfp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf",
	"modelopt", "modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed", "petit_nvfp4", "w8a8_int8", "w8a8_fp8",
	"moe_wna16", "w4afp8", "mxfp4", "auto-round", "auto-round-int8", "compressed-tensors", "modelslim", "mxfp_w4a8", "quark",
	"quark_int4fp8_moe", "quark_mxfp4", "mlx_q4", "mlx_q8", "unquant", "humming"}

var modelDTypeChoices = []string{"auto", "half", "float16", "bfloat16", "float", "float32"}

// vllmSpecs are the vLLM flags the imitation knows (EngineArgs in
// vllm/engine/arg_utils.py and the server's own in
// vllm/entrypoints/openai/cli_args.py); any other is unrecognized.
var vllmSpecs = []argSpec{
	{Dest: "model", Flags: []string{"--model"}},
	{Dest: "host", Flags: []string{"--host"}},
	{Dest: "port", Flags: []string{"--port"}, Kind: argInt},
	{Dest: "served_model_name", Flags: []string{"--served-model-name"}, Kind: argMulti},
	{Dest: "dtype", Flags: []string{"--dtype"}, Choices: modelDTypeChoices},
	{Dest: "kv_cache_dtype", Flags: []string{"--kv-cache-dtype"}, Choices: vllmKVChoices},
	{Dest: "max_num_seqs", Flags: []string{"--max-num-seqs"}, Kind: argInt},
	{Dest: "max_num_batched_tokens", Flags: []string{"--max-num-batched-tokens"}, Kind: argHumanInt},
	{Dest: "max_model_len", Flags: []string{"--max-model-len"}, Kind: argHumanInt},
	{Dest: "enable_prefix_caching", Flags: []string{"--enable-prefix-caching"}, Kind: argBoolOptional},
	{Dest: "gpu_memory_utilization", Flags: []string{"--gpu-memory-utilization"}, Kind: argFloat},
	{Dest: "kv_cache_memory_bytes", Flags: []string{"--kv-cache-memory-bytes"}, Kind: argHumanInt},
	{Dest: "seed", Flags: []string{"--seed"}, Kind: argInt},
	{Dest: "block_size", Flags: []string{"--block-size"}, Kind: argInt, Choices: []string{"1", "8", "16", "32", "64", "128", "256"}},
	{Dest: "tensor_parallel_size", Flags: []string{"--tensor-parallel-size", "-tp"}, Kind: argInt},
	{Dest: "quantization", Flags: []string{"--quantization", "-q"}},
	{Dest: "trust_remote_code", Flags: []string{"--trust-remote-code"}, Kind: argBoolOptional},
	{Dest: "enforce_eager", Flags: []string{"--enforce-eager"}, Kind: argBoolOptional},
	{Dest: "disable_log_stats", Flags: []string{"--disable-log-stats"}, Kind: argStoreTrue},
	{Dest: "api_key", Flags: []string{"--api-key"}},
	{Dest: "uvicorn_log_level", Flags: []string{"--uvicorn-log-level"}, Choices: []string{"critical", "debug", "error", "info", "trace", "warning"}},
}

// sglangSpecs are the SGLang flags the imitation knows (ServerArgs in
// python/sglang/srt/server_args.py); any other is unrecognized.
var sglangSpecs = []argSpec{
	{Dest: "model_path", Flags: []string{"--model-path", "--model"}},
	{Dest: "host", Flags: []string{"--host"}},
	{Dest: "port", Flags: []string{"--port"}, Kind: argInt},
	{Dest: "served_model_name", Flags: []string{"--served-model-name"}},
	{Dest: "dtype", Flags: []string{"--dtype"}, Choices: modelDTypeChoices},
	{Dest: "kv_cache_dtype", Flags: []string{"--kv-cache-dtype"}, Choices: sglangKVChoices},
	{Dest: "max_running_requests", Flags: []string{"--max-running-requests"}, Kind: argInt},
	{Dest: "max_total_tokens", Flags: []string{"--max-total-tokens"}, Kind: argInt},
	{Dest: "context_length", Flags: []string{"--context-length"}, Kind: argInt},
	{Dest: "mem_fraction_static", Flags: []string{"--mem-fraction-static"}, Kind: argFloat},
	{Dest: "chunked_prefill_size", Flags: []string{"--chunked-prefill-size"}, Kind: argInt},
	{Dest: "cuda_graph_max_bs", Flags: []string{"--cuda-graph-max-bs"}, Kind: argInt},
	{Dest: "disable_radix_cache", Flags: []string{"--disable-radix-cache"}, Kind: argStoreTrue},
	{Dest: "disable_cuda_graph", Flags: []string{"--disable-cuda-graph"}, Kind: argStoreTrue},
	{Dest: "enable_metrics", Flags: []string{"--enable-metrics"}, Kind: argStoreTrue},
	{Dest: "decode_log_interval", Flags: []string{"--decode-log-interval"}, Kind: argInt},
	{Dest: "random_seed", Flags: []string{"--random-seed"}, Kind: argInt},
	{Dest: "tp_size", Flags: []string{"--tp-size", "--tensor-parallel-size", "--tp"}, Kind: argInt},
	{Dest: "quantization", Flags: []string{"--quantization"}, Choices: sglangQuantChoices},
	{Dest: "trust_remote_code", Flags: []string{"--trust-remote-code"}, Kind: argStoreTrue},
	{Dest: "page_size", Flags: []string{"--page-size"}, Kind: argInt},
	{Dest: "log_level", Flags: []string{"--log-level"}},
	{Dest: "api_key", Flags: []string{"--api-key"}},
}

// EngineArgs is an engine command line read the way the engine reads it.
type EngineArgs struct {
	Engine string // "vllm" or "sglang"
	Form   string // how it was started, e.g. "vllm serve"
	Args   ParsedArgs
	// Model is the checkpoint path (vLLM's model_tag or --model, SGLang's
	// --model-path).
	Model string
}

// ErrNotEngineArgv is returned for an argv that is not the imitated
// engine's launch command.
var ErrNotEngineArgv = errors.New("not the engine's command line")

// ParseEngineArgv reads the engine argv after simengine's "--" (the
// executable included) as the imitated engine would: `vllm serve MODEL
// ...` or `python3 -m vllm.entrypoints.openai.api_server --model MODEL
// ...` for vLLM; `python3 -m sglang.launch_server --model-path MODEL ...`
// or `sglang serve --model-path MODEL ...` for SGLang. A refusal of the
// engine's argparse is an *ArgError.
func ParseEngineArgv(engine string, argv []string) (EngineArgs, error) {
	ea := EngineArgs{Engine: engine}
	rest, form, err := splitLaunch(engine, argv)
	if err != nil {
		return ea, err
	}
	ea.Form = form
	var p ArgParser
	switch form {
	case "vllm serve":
		p = ArgParser{Prog: "vllm serve", Usage: "vllm serve [model_tag] [options]",
			UnrecognizedProg: "vllm", UnrecognizedUsage: "vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...",
			Specs: vllmSpecs, Positional: "model_tag", Underscores: true}
	case "vllm.entrypoints.openai.api_server":
		p = ArgParser{Prog: "api_server.py", Usage: "api_server.py [-h] [options]", Specs: vllmSpecs, Underscores: true}
	case "sglang.launch_server":
		p = ArgParser{Prog: "launch_server.py", Usage: "launch_server.py [-h] --model-path MODEL_PATH [options]",
			Specs: sglangSpecs, Required: []string{"model_path"}, Abbrev: true}
	case "sglang serve":
		p = ArgParser{Prog: "sglang serve", Usage: "sglang serve [-h] --model-path MODEL_PATH [options]",
			Specs: sglangSpecs, Required: []string{"model_path"}, Abbrev: true}
	}
	ea.Args, err = p.Parse(rest)
	if err != nil {
		return ea, err
	}
	if engine == "vllm" {
		ea.Model = ea.Args.Str("model_tag", ea.Args.Str("model", ""))
	} else {
		ea.Model = ea.Args.Str("model_path", "")
	}
	if ea.Model == "" {
		return ea, fmt.Errorf("%w: it names no model (a real %s would fetch its default model from the Hub)", ErrNotEngineArgv, engine)
	}
	tp := ea.Args.Int("tensor_parallel_size", ea.Args.Int("tp_size", 1))
	if tp != 1 {
		return ea, fmt.Errorf("%w: tensor parallel size %d: simengine simulates one GPU", ErrNotEngineArgv, tp)
	}
	return ea, nil
}

// splitLaunch finds the engine's own arguments after its launcher.
func splitLaunch(engine string, argv []string) ([]string, string, error) {
	for i, w := range argv {
		next := ""
		if i+1 < len(argv) {
			next = argv[i+1]
		}
		base := filepath.Base(w)
		switch {
		case engine == "vllm" && base == "vllm" && next == "serve":
			return argv[i+2:], "vllm serve", nil
		case engine == "vllm" && w == "-m" && next == "vllm.entrypoints.openai.api_server":
			return argv[i+2:], next, nil
		case engine == "sglang" && w == "-m" && next == "sglang.launch_server":
			return argv[i+2:], next, nil
		case engine == "sglang" && base == "sglang" && next == "serve":
			return argv[i+2:], "sglang serve", nil
		}
	}
	want := map[string]string{
		"vllm":   "`vllm serve MODEL ...` or `python3 -m vllm.entrypoints.openai.api_server --model MODEL ...`",
		"sglang": "`python3 -m sglang.launch_server --model-path MODEL ...` or `sglang serve --model-path MODEL ...`",
	}[engine]
	return nil, "", fmt.Errorf("%w: --imitate %s wants %s after --, got %q", ErrNotEngineArgv, engine, want, strings.Join(argv, " "))
}
