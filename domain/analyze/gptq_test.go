package analyze_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// The GPTQ writers these cases follow:
//   - github.com/AutoGPTQ/AutoGPTQ at 9f7d370 (0.8.0.dev0, 2025-04-11),
//     auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py: QuantLinear's
//     buffers qweight I32 [in // 32 * bits, out], qzeros I32
//     [ceil(in / g), out // 32 * bits], scales F16 [ceil(in / g), out],
//     g_idx I32 [in]; pack() fills three words with 32 values at 3 bits;
//     auto_gptq/quantization/config.py (BaseQuantizeConfig.to_dict: bits,
//     group_size, desc_act, sym, quant_method, checkpoint_format).
//   - github.com/ModelCloud/GPTQModel at f4c327a (7.3.4+1, 2026-08-23),
//     gptqmodel/nn_modules/qlinear/__init__.py (_register_gptq_buffers:
//     qweight [ceil(in · bits / pack_dtype_bits), out] in pack_dtype,
//     qzeros [ceil(in / g), ceil(out · bits / pack_dtype_bits)]) and
//     gptqmodel/quantization/config.py (to_dict: bits, dynamic,
//     group_size, desc_act, lm_head, method, quant_method, format,
//     checkpoint_format, pack_dtype, meta).

// gptqWriter stores a linear as QuantLinear does, in words of dt.
func gptqWriter(bits, g int64, dt safetensors.DType) writer {
	return func(b *build, name string, s []int64) {
		m := module(name)
		out, in := s[0], s[1]
		if g <= 0 {
			g = in
		}
		w := dt.Bits()
		b.part(name, m+".qweight", dt, ceil(in*bits, w), out)
		b.part(name, m+".qzeros", dt, ceil(in, g), ceil(out*bits, w))
		b.part(name, m+".scales", safetensors.F16, ceil(in, g), out)
		b.part(name, m+".g_idx", safetensors.I32, in)
	}
}

// autoGPTQConfig is what AutoGPTQ writes into config.json.
func autoGPTQConfig(bits, g int, descAct, sym bool) map[string]any {
	return map[string]any{"bits": bits, "group_size": g, "damp_percent": 0.01, "desc_act": descAct, "static_groups": false,
		"sym": sym, "true_sequential": true, "model_name_or_path": nil, "model_file_base_name": "model",
		"quant_method": "gptq", "checkpoint_format": "gptq"}
}

// gptqModelConfig is what GPTQModel writes into config.json.
func gptqModelConfig(bits, g int, packDType string, dynamic map[string]any) map[string]any {
	qc := map[string]any{"bits": bits, "group_size": g, "desc_act": true, "lm_head": false, "method": "gptq",
		"quant_method": "gptq", "format": "gptq", "checkpoint_format": "gptq", "pack_dtype": packDType,
		"meta": map[string]any{"quantizer": []string{"gptqmodel:7.3.4"}, "damp_percent": 0.05, "true_sequential": true}}
	if dynamic != nil {
		qc["dynamic"] = dynamic
	}
	return qc
}

func TestGPTQFormats(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	cases := []struct {
		formatCase
		actOrder any
		group    *int
	}{
		{formatCase: formatCase{name: "AutoGPTQ 4 bits group 32", m: q, qc: autoGPTQConfig(4, 32, false, true),
			w: gptqWriter(4, 32, safetensors.I32), label: "W4A16KV16", format: "w4a16"}, group: ptr(32)},
		{formatCase: formatCase{name: "AutoGPTQ 4 bits desc_act, asymmetric", m: q, qc: autoGPTQConfig(4, 32, true, false),
			w: gptqWriter(4, 32, safetensors.I32), label: "W4A16KV16", format: "w4a16"}, actOrder: "group", group: ptr(32)},
		{formatCase: formatCase{name: "AutoGPTQ 2 bits", m: q, qc: autoGPTQConfig(2, 32, false, true),
			w: gptqWriter(2, 32, safetensors.I32), label: "W2A16KV16", format: "w2a16"}, group: ptr(32)},
		{formatCase: formatCase{name: "AutoGPTQ 3 bits: 32 values in three words", m: q, qc: autoGPTQConfig(3, 32, true, true),
			w: gptqWriter(3, 32, safetensors.I32), label: "W3A16KV16", format: "w3a16"}, actOrder: "group", group: ptr(32)},
		{formatCase: formatCase{name: "AutoGPTQ 8 bits", m: q, qc: autoGPTQConfig(8, 64, false, true),
			w: gptqWriter(8, 64, safetensors.I32), label: "W8A16KV16", format: "w8a16"}, group: ptr(64)},
		{formatCase: formatCase{name: "AutoGPTQ 4 bits, group_size -1 (per channel)", m: q, qc: autoGPTQConfig(4, -1, false, true),
			w: gptqWriter(4, -1, safetensors.I32), label: "W4A16KV16", format: "w4a16"}},
		{formatCase: formatCase{name: "GPTQModel 4 bits, pack_dtype int32", m: q, qc: gptqModelConfig(4, 32, "int32", nil),
			w: gptqWriter(4, 32, safetensors.I32), label: "W4A16KV16", format: "w4a16"}, actOrder: "group", group: ptr(32)},
		{formatCase: formatCase{name: "GPTQModel 3 bits, pack_dtype int8", m: q, qc: gptqModelConfig(3, 32, "int8", nil),
			w: gptqWriter(3, 32, safetensors.I8), label: "W3A16KV16", format: "w3a16"}, actOrder: "group", group: ptr(32)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := analyzeFormat(t, tc.formatCase)
			require.Equal(t, tc.actOrder, got.Quantization.Weights.ActOrder)
			require.Equal(t, tc.group, got.Quantization.Weights.GroupSize)
			require.Nil(t, got.Quantization.Activations)
		})
	}
}

// TestGPTQModelDynamic: GPTQModel's dynamic map gives the down projections
// 8 bits and leaves layer 1's attention unquantized. The 8-bit rows are
// what the config says, not a packing mismatch; the unquantized attention
// is a decoder linear in 16 bits, so the label reads W16.
func TestGPTQModelDynamic(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	dyn := map[string]any{`+:.*down_proj`: map[string]any{"bits": 8}, `-:model\.layers\.1\.self_attn\..*`: map[string]any{}}
	w4, w8 := gptqWriter(4, 32, safetensors.I32), gptqWriter(8, 32, safetensors.I32)
	mixed := func(b *build, name string, s []int64) {
		if module(name) == "model.layers.0.mlp.down_proj" || module(name) == "model.layers.1.mlp.down_proj" {
			w8(b, name, s)
			return
		}
		w4(b, name, s)
	}
	skipAttn1 := func(name string) bool {
		return q.decoderOnly(name) && !(len(name) > 24 && name[:24] == "model.layers.1.self_attn")
	}
	got, b := analyzeFormat(t, formatCase{name: "dynamic", m: q, qc: gptqModelConfig(4, 32, "int32", dyn), quantize: skipAttn1,
		w: mixed, label: "W16A16KV16", format: "w8a16"})
	require.Greater(t, b.bpw(q), 4.5, "the BF16 attention of layer 1 is in bits_per_weight")
	require.Equal(t, 8, got.Quantization.Weights.NumBits, "the widest group is the block's")
}
