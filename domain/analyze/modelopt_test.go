package analyze_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// The ModelOpt writers these cases follow are those of
// github.com/NVIDIA/TensorRT-Model-Optimizer at 5a4242f (2025-12-05, the
// 0.40 release branch):
//   - modelopt/torch/export/unified_export_hf.py (export_hf_checkpoint:
//     hf_quant_config.json always, and the converted scheme in config.json's
//     quantization_config; _export_quantized_weight: weight, weight_scale,
//     weight_scale_2 for NVFP4, input_scale);
//   - modelopt/torch/export/convert_hf_config.py
//     (convert_hf_quant_config_format: quant_method "modelopt", quant_algo,
//     config_groups, ignore, kv_cache_scheme, producer);
//   - modelopt/torch/export/quant_utils.py (postprocess_state_dict:
//     k_bmm_quantizer._amax becomes k_proj.k_scale, v_proj.v_scale).
// NVFP4 weights are U8 [out, in/2] with an F8_E4M3 scale per 16 and a
// scalar F32 weight_scale_2; FP8 weights are F8_E4M3 with scalar F32
// weight_scale; input_scale is a scalar F32.

// hfQuantConfig is hf_quant_config.json.
func hfQuantConfig(algo string, kv string) map[string]any {
	q := map[string]any{"quant_algo": algo, "exclude_modules": []string{"lm_head"}}
	if algo == "NVFP4" {
		q["group_size"] = 16
	}
	if kv != "" {
		q["kv_cache_quant_algo"] = kv
	}
	return map[string]any{"producer": map[string]any{"name": "modelopt", "version": "0.40.0"}, "quantization": q}
}

// modelOptConfig is config.json's quantization_config, as
// convert_hf_quant_config_format writes it.
func modelOptConfig(algo string, kv bool) map[string]any {
	args := map[string]any{"dynamic": false, "num_bits": 8, "type": "float"}
	if algo == "NVFP4" {
		args = map[string]any{"dynamic": false, "num_bits": 4, "type": "float", "group_size": 16}
	}
	qc := map[string]any{
		"config_groups": map[string]any{"group_0": map[string]any{"input_activations": args, "weights": args, "targets": []string{"Linear"}}},
		"ignore":        []string{"lm_head"}, "quant_algo": algo, "quant_method": "modelopt",
		"producer": map[string]any{"name": "modelopt", "version": "0.40.0"},
	}
	if kv {
		qc["kv_cache_scheme"] = map[string]any{"dynamic": false, "num_bits": 8, "type": "float"}
	}
	return qc
}

func modelOptNVFP4(b *build, name string, s []int64) {
	m := module(name)
	b.part(name, name, safetensors.U8, s[0], s[1]/2)
	b.part(name, m+".weight_scale", safetensors.F8E4M3, s[0], s[1]/16)
	b.part(name, m+".weight_scale_2", safetensors.F32)
	b.add(m+".input_scale", safetensors.F32)
}

func modelOptFP8(b *build, name string, s []int64) {
	m := module(name)
	b.part(name, name, safetensors.F8E4M3, s...)
	b.part(name, m+".weight_scale", safetensors.F32)
	b.add(m+".input_scale", safetensors.F32)
}

// modelOptKV adds k_proj.k_scale and v_proj.v_scale (scalar F32).
func modelOptKV(b *build) {
	for l := range 2 {
		p := fmt.Sprintf("model.layers.%d.self_attn.", l)
		b.add(p+"k_proj.k_scale", safetensors.F32)
		b.add(p+"v_proj.v_scale", safetensors.F32)
	}
}

func TestModelOptFormats(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	cases := []formatCase{
		{name: "NVFP4 from config.json", m: q, qc: modelOptConfig("NVFP4", true), w: modelOptNVFP4, extra: modelOptKV,
			label: "W4A4KV8", format: "w4a4", kvBits: ptr(8)},
		{name: "FP8 from config.json", m: q, qc: modelOptConfig("FP8", true), w: modelOptFP8, extra: modelOptKV,
			label: "W8A8KV8", format: "w8a8", kvBits: ptr(8)},
		{name: "NVFP4 from hf_quant_config.json alone", m: q, hf: hfQuantConfig("NVFP4", "FP8"), w: modelOptNVFP4, extra: modelOptKV,
			label: "W4A4KV8", format: "w4a4", kvBits: ptr(8)},
		{name: "FP8 from hf_quant_config.json alone", m: q, hf: hfQuantConfig("FP8", "FP8"), w: modelOptFP8, extra: modelOptKV,
			label: "W8A8KV8", format: "w8a8", kvBits: ptr(8)},
		{name: "NVFP4 KV cache from hf_quant_config.json", m: q, hf: hfQuantConfig("NVFP4", "NVFP4"), w: modelOptNVFP4,
			label: "W4A4KV4", format: "w4a4", kvBits: ptr(4)},
		{name: "both files: config.json first (hf_quant_config.json here says FP8)", m: q, qc: modelOptConfig("NVFP4", false), hf: hfQuantConfig("FP8", ""), w: modelOptNVFP4,
			label: "W4A4KV16", format: "w4a4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := analyzeFormat(t, tc)
			require.Equal(t, []string{"lm_head"}, got.Quantization.Ignore)
			require.NotNil(t, got.Quantization.Activations)
		})
	}
}

// TestModelOptWithoutItsConfig: the same NVFP4 tensors without
// hf_quant_config.json (a bundle that left it out) read as unrecognised
// 4-bit weights with 16-bit activations, so a W4A4 declaration is wider
// than what can be shown; a broken hf_quant_config.json is refused.
func TestModelOptWithoutItsConfig(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	b := write(q, q.decoderOnly, modelOptNVFP4)
	got := analyzeBuild(t, q, b, nil, "W4A4KV16")
	require.Equal(t, "unrecognized", got.Format)
	require.Equal(t, "W4A16KV16", got.DetectedPrecision)
	require.Equal(t, []string{"precision_wider_than_declared"}, codes(got))

	_, err := analyze.Analyze(analyze.Input{
		Config: q.config(t, nil), HFQuantConfig: []byte(`{"producer":`), Checkpoint: b.checkpoint(t, false),
		Source: analyze.Source{Config: q.config(t, nil), Tensors: q.src},
	})
	require.Equal(t, reason.ConfigInvalid, analyze.CodeOf(err))
	require.ErrorContains(t, err, analyze.HFQuantConfigFile)
}
