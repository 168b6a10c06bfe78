package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseEngineArgv reads engine command lines as the pinned releases'
// argparse would, and refuses the ones they refuse, in their words.
func TestParseEngineArgv(t *testing.T) {
	vllm := func(args ...string) []string { return append([]string{"vllm", "serve"}, args...) }
	sglang := func(args ...string) []string {
		return append([]string{"python3", "-m", "sglang.launch_server"}, args...)
	}
	for _, tc := range []struct {
		name    string
		engine  string
		argv    []string
		model   string
		check   func(t *testing.T, a ParsedArgs)
		wantErr string // the whole argparse refusal, or a part of simengine's
	}{
		{name: "vllm serve with every flag form", engine: "vllm",
			argv: vllm("/ck", "--port", "8000", "--kv-cache-dtype=fp8", "--max_model_len", "4k", "--no-enable-prefix-caching",
				"--served-model-name", "a", "b", "--kv-cache-memory-bytes", "123456789", "--gpu-memory-utilization", "0.85", "-tp", "1"),
			model: "/ck",
			check: func(t *testing.T, a ParsedArgs) {
				require.Equal(t, int64(8000), a.Int("port", 0))
				require.Equal(t, "fp8", a.Str("kv_cache_dtype", ""))
				require.Equal(t, int64(4000), a.Int("max_model_len", 0))
				require.False(t, a.Bool("enable_prefix_caching", true))
				require.Equal(t, []string{"a", "b"}, a.Multi["served_model_name"])
				require.Equal(t, int64(123456789), a.Int("kv_cache_memory_bytes", 0))
				require.InDelta(t, 0.85, a.Float("gpu_memory_utilization", 0), 1e-12)
			}},
		{name: "vllm module form", engine: "vllm", argv: []string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--enable-prefix-caching"},
			model: "/m", check: func(t *testing.T, a ParsedArgs) { require.True(t, a.Bool("enable_prefix_caching", false)) }},
		{name: "vllm unknown flag", engine: "vllm", argv: vllm("/ck", "--bogus", "1"),
			wantErr: "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\nvllm: error: unrecognized arguments: --bogus 1"},
		{name: "vllm nvfp4 KV", engine: "vllm", argv: vllm("/ck", "--kv-cache-dtype", "nvfp4"),
			wantErr: "usage: vllm serve [model_tag] [options]\nvllm serve: error: argument --kv-cache-dtype: invalid choice: 'nvfp4' (choose from auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla)"},
		{name: "vllm missing value", engine: "vllm", argv: vllm("/ck", "--port"),
			wantErr: "usage: vllm serve [model_tag] [options]\nvllm serve: error: argument --port: expected one argument"},
		{name: "vllm bad int", engine: "vllm", argv: vllm("/ck", "--max-num-seqs", "many"),
			wantErr: "vllm serve: error: argument --max-num-seqs: invalid int value: 'many'"},
		{name: "vllm module unknown flag", engine: "vllm", argv: []string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--nope"},
			wantErr: "usage: api_server.py [-h] [options]\napi_server.py: error: unrecognized arguments: --nope"},
		{name: "vllm two GPUs", engine: "vllm", argv: vllm("/ck", "--tensor-parallel-size", "2"), wantErr: "simulates one GPU"},
		{name: "sglang launch_server", engine: "sglang",
			argv:  sglang("--model-path", "/ck", "--kv-cache-dtype", "fp8_e4m3", "--disable-radix-cache", "--enable-metrics", "--decode-log-interval", "1", "--context-len", "4096"),
			model: "/ck",
			check: func(t *testing.T, a ParsedArgs) {
				require.True(t, a.Bool("disable_radix_cache", false))
				require.True(t, a.Bool("enable_metrics", false))
				require.Equal(t, int64(1), a.Int("decode_log_interval", 40))
				require.Equal(t, int64(4096), a.Int("context_length", 0), "argparse takes a unique prefix")
			}},
		{name: "sglang serve", engine: "sglang", argv: []string{"sglang", "serve", "--model-path", "/s", "--tp-size", "1"}, model: "/s"},
		{name: "sglang store_true with a value", engine: "sglang", argv: sglang("--model-path", "/ck", "--enable-metrics=yes"),
			wantErr: "launch_server.py: error: argument --enable-metrics: ignored explicit argument 'yes'"},
		{name: "sglang required model path", engine: "sglang", argv: sglang("--port", "1"),
			wantErr: "usage: launch_server.py [-h] --model-path MODEL_PATH [options]\nlaunch_server.py: error: the following arguments are required: --model-path/--model"},
		{name: "sglang invalid KV choice", engine: "sglang", argv: sglang("--model-path", "/ck", "--kv-cache-dtype", "fp8"),
			wantErr: "launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp8' (choose from auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16, fp4_e2m1)"},
		{name: "sglang ambiguous prefix", engine: "sglang", argv: sglang("--model-path", "/ck", "--max", "3"),
			wantErr: "launch_server.py: error: ambiguous option: --max could match --max-running-requests, --max-total-tokens"},
		{name: "sglang argv under vllm", engine: "vllm", argv: sglang("--model-path", "/ck"), wantErr: "--imitate vllm wants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ea, err := ParseEngineArgv(tc.engine, tc.argv)
			if tc.wantErr != "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.wantErr)
				var ae *ArgError
				if !errors.As(err, &ae) {
					require.ErrorIs(t, err, ErrNotEngineArgv)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.model, ea.Model)
			if tc.check != nil {
				tc.check(t, ea.Args)
			}
		})
	}
}

func TestParseHumanInt(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4k": 4000, "4K": 4096, "1m": 1000000, "2M": 2 << 20, "1G": 1 << 30} {
		got, err := parseHumanInt(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := parseHumanInt("lots")
	require.Error(t, err)
}
