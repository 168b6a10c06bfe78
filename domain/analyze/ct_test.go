package analyze_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// The compressed-tensors writers these cases follow are those of
// github.com/neuralmagic/compressed-tensors at 52792be0 (0.12.2+23,
// 2025-10-30):
//   - src/compressed_tensors/compressors/quantized_compressors/naive_quantized.py
//     (float-quantized, int-quantized: M.weight in the scheme's dtype);
//   - .../pack_quantized.py (PackedQuantizationCompressor: weight_packed I32
//     [out, ceil(in / (32//b))], weight_shape, and for asymmetric group or
//     channel schemes weight_zero_point packed along dimension 0, I32
//     [ceil(out / (32//b)), groups]);
//   - .../fp4_quantized.py (NVFP4PackedCompressor: weight_packed U8
//     [out, in/2]);
//   - .../base.py (zero points skipped when symmetric or packed);
//   - src/compressed_tensors/quantization/lifecycle/initialize.py (scale
//     shapes per strategy, FP8 scales for FP4, the weight's dtype
//     otherwise; weight_g_idx I32 [in] for group activation ordering;
//     weight_global_scale F32 [1] for tensor_group; self_attn.k_scale and
//     v_scale for a KV cache scheme);
//   - src/compressed_tensors/quantization/quant_scheme.py (the preset
//     schemes: FP8, FP8_DYNAMIC, FP8_BLOCK, W8A8, W4A16, W4A16_ASYM, NVFP4).

// ctConfig is a compressed-tensors quantization_config of one Linear group,
// lm_head ignored, as llm-compressor writes it.
func ctConfig(format string, weights, acts map[string]any, kv map[string]any) map[string]any {
	g := map[string]any{"targets": []string{"Linear"}, "weights": weights, "input_activations": acts, "output_activations": nil}
	qc := map[string]any{
		"quant_method": "compressed-tensors", "format": format, "quantization_status": "compressed",
		"config_groups": map[string]any{"group_0": g}, "ignore": []string{"lm_head"},
		"kv_cache_scheme": kv, "sparsity_config": map[string]any{},
	}
	if kv == nil {
		qc["kv_cache_scheme"] = nil
	}
	return qc
}

func qargs(bits int, typ, strategy string, groupSize any, symmetric, dynamic any) map[string]any {
	return map[string]any{"num_bits": bits, "type": typ, "strategy": strategy, "group_size": groupSize,
		"symmetric": symmetric, "dynamic": dynamic, "actorder": nil, "block_structure": nil, "observer": "minmax", "observer_kwargs": map[string]any{}}
}

// ctNaive stores M.weight in dt with a scale of the given shape (the
// weight's dtype, BF16), a zero point of the scale's shape when
// asymmetric, and a static input scale when static.
func ctNaive(dt safetensors.DType, scale func(out, in int64) []int64, zeroPoint safetensors.DType, staticInput bool) writer {
	return func(b *build, name string, s []int64) {
		m := module(name)
		b.part(name, name, dt, s...)
		b.part(name, m+".weight_scale", safetensors.BF16, scale(s[0], s[1])...)
		if zeroPoint != "" {
			b.part(name, m+".weight_zero_point", zeroPoint, scale(s[0], s[1])...)
		}
		if staticInput {
			b.add(m+".input_scale", safetensors.BF16, 1)
		}
	}
}

func perChannel(out, _ int64) []int64 { return []int64{out, 1} }
func perTensor(_, _ int64) []int64    { return []int64{1} }
func perBlock(bo, bi int64) func(out, in int64) []int64 {
	return func(out, in int64) []int64 { return []int64{ceil(out, bo), ceil(in, bi)} }
}

// ctPacked is PackedQuantizationCompressor: b-bit values, 32//b to an I32,
// group size g (0 for channel), asymmetric schemes with their zero points
// packed along dimension 0, and weight_g_idx with group activation order.
func ctPacked(bits, g int64, symmetric, gIdx bool) writer {
	return func(b *build, name string, s []int64) {
		m := module(name)
		out, in := s[0], s[1]
		groups := int64(1)
		if g > 0 {
			groups = in / g
		}
		b.part(name, m+".weight_packed", safetensors.I32, out, ceil(in, 32/bits))
		b.part(name, m+".weight_scale", safetensors.BF16, out, groups)
		b.part(name, m+".weight_shape", safetensors.I64, 2)
		if !symmetric {
			b.part(name, m+".weight_zero_point", safetensors.I32, ceil(out, 32/bits), groups)
		}
		if gIdx {
			b.part(name, m+".weight_g_idx", safetensors.I32, in)
		}
	}
}

// ctNVFP4Writer is NVFP4PackedCompressor: two FP4 values a byte, an FP8
// scale per 16, a global scale, and the input's global scale.
func ctNVFP4Writer(b *build, name string, s []int64) {
	m := module(name)
	b.part(name, m+".weight_packed", safetensors.U8, s[0], s[1]/2)
	b.part(name, m+".weight_scale", safetensors.F8E4M3, s[0], s[1]/16)
	b.part(name, m+".weight_global_scale", safetensors.F32, 1)
	b.add(m+".input_global_scale", safetensors.F32, 1)
}

func TestCompressedTensorsFormats(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	fp8Kv := map[string]any{"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false, "symmetric": true}
	cases := []formatCase{
		{name: "float-quantized FP8_DYNAMIC", m: q,
			qc: ctConfig("float-quantized", qargs(8, "float", "channel", nil, true, false), qargs(8, "float", "token", nil, true, true), nil),
			w:  ctNaive(safetensors.F8E4M3, perChannel, "", false), kv: "auto", label: "W8A8KV16", format: "w8a8"},
		{name: "float-quantized FP8 static, per tensor", m: q,
			qc: ctConfig("float-quantized", qargs(8, "float", "tensor", nil, true, false), qargs(8, "float", "tensor", nil, true, false), nil),
			w:  ctNaive(safetensors.F8E4M3, perTensor, "", true), kv: "fp8", label: "W8A8KV8", format: "w8a8"},
		{name: "float-quantized FP8_BLOCK", m: q,
			qc: func() map[string]any {
				w := qargs(8, "float", "block", nil, true, false)
				w["block_structure"] = []int{128, 128}
				return ctConfig("float-quantized", w, qargs(8, "float", "group", 128, true, true), nil)
			}(),
			w: ctNaive(safetensors.F8E4M3, perBlock(128, 128), "", false), kv: "fp8", label: "W8A8KV8", format: "w8a8"},
		{name: "int-quantized W8A8", m: q,
			qc: ctConfig("int-quantized", qargs(8, "int", "channel", nil, true, false), qargs(8, "int", "token", nil, true, true), nil),
			w:  ctNaive(safetensors.I8, perChannel, "", false), kv: "auto", label: "W8A8KV16", format: "w8a8"},
		{name: "int-quantized W8A8 asymmetric weights", m: q,
			qc: ctConfig("int-quantized", qargs(8, "int", "channel", nil, false, false), qargs(8, "int", "token", nil, true, true), nil),
			w:  ctNaive(safetensors.I8, perChannel, safetensors.I8, false), kv: "auto", label: "W8A8KV16", format: "w8a8"},
		{name: "pack-quantized W4A16 symmetric group 32", m: q,
			qc: ctConfig("pack-quantized", qargs(4, "int", "group", 32, true, false), nil, nil),
			w:  ctPacked(4, 32, true, false), kv: "auto", label: "W4A16KV16", format: "w4a16"},
		{name: "pack-quantized W4A16_ASYM group 32", m: q,
			qc: ctConfig("pack-quantized", qargs(4, "int", "group", 32, false, false), nil, nil),
			w:  ctPacked(4, 32, false, false), kv: "auto", label: "W4A16KV16", format: "w4a16"},
		{name: "pack-quantized W4A16 symmetric channel", m: q,
			qc: ctConfig("pack-quantized", qargs(4, "int", "channel", nil, true, false), nil, nil),
			w:  ctPacked(4, 0, true, false), kv: "auto", label: "W4A16KV16", format: "w4a16"},
		{name: "pack-quantized W4A16 asymmetric channel", m: q,
			qc: ctConfig("pack-quantized", qargs(4, "int", "channel", nil, false, false), nil, nil),
			w:  ctPacked(4, 0, false, false), kv: "auto", label: "W4A16KV16", format: "w4a16"},
		{name: "pack-quantized W4A16 group 32, activation order with g_idx", m: q,
			qc: func() map[string]any {
				w := qargs(4, "int", "group", 32, true, false)
				w["actorder"] = "group"
				return ctConfig("pack-quantized", w, nil, nil)
			}(),
			w: ctPacked(4, 32, true, true), kv: "auto", label: "W4A16KV16", format: "w4a16"},
		{name: "pack-quantized W8A16 channel", m: q,
			qc: ctConfig("pack-quantized", qargs(8, "int", "channel", nil, true, false), nil, nil),
			w:  ctPacked(8, 0, true, false), kv: "auto", label: "W8A16KV16", format: "w8a16"},
		{name: "pack-quantized 3 bits, ten values an int32", m: q,
			qc: ctConfig("pack-quantized", qargs(3, "int", "group", 32, false, false), nil, nil),
			w:  ctPacked(3, 32, false, false), kv: "auto", label: "W3A16KV16", format: "w3a16"},
		{name: "nvfp4-pack-quantized NVFP4", m: q,
			qc: ctConfig("nvfp4-pack-quantized", qargs(4, "float", "tensor_group", 16, true, false), qargs(4, "float", "tensor_group", 16, true, "local"), nil),
			w:  ctNVFP4Writer, kv: "nvfp4", label: "W4A4KV4", format: "w4a4"},
		{name: "NVFP4 with an FP8 kv_cache_scheme, k_scale and v_scale", m: q,
			qc: ctConfig("nvfp4-pack-quantized", qargs(4, "float", "tensor_group", 16, true, false), qargs(4, "float", "tensor_group", 16, true, "local"), fp8Kv),
			w:  ctNVFP4Writer, extra: kvScales(2, "model.", safetensors.BF16, 1), label: "W4A4KV8", format: "w4a4", kvBits: ptr(8)},
		{name: "FP8_DYNAMIC with an FP8 kv_cache_scheme, engine fp8", m: q,
			qc: ctConfig("float-quantized", qargs(8, "float", "channel", nil, true, false), qargs(8, "float", "token", nil, true, true), fp8Kv),
			w:  ctNaive(safetensors.F8E4M3, perChannel, "", false), extra: kvScales(2, "model.", safetensors.BF16, 1),
			kv: "fp8", label: "W8A8KV8", format: "w8a8", kvBits: ptr(8)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := analyzeFormat(t, tc)
			require.Equal(t, []string{"lm_head"}, got.Quantization.Ignore)
			require.Len(t, got.UnquantizedModules, 7, "embed_tokens, lm_head, five kinds of norm: %v", got.UnquantizedModules)
		})
	}
}
