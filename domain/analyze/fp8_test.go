package analyze_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// The block FP8 writers these cases follow:
//   - github.com/deepseek-ai/DeepSeek-V3 at 9b4e978 (2025-08-28),
//     README_WEIGHTS.md (quantization_config {"activation_scheme":
//     "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size":
//     [128, 128]}; weight_scale_inv, F32, one per 128x128 block, beside
//     each FP8 weight) and inference/model.py (Linear's scale
//     [ceil(out/128), ceil(in/128)]; the MoE Gate stays BF16);
//   - github.com/huggingface/transformers at 0095b97,
//     src/transformers/integrations/finegrained_fp8.py (FP8Linear: weight
//     F8_E4M3 [out, in], weight_scale_inv F32 [ceil(out/bo), ceil(in/bi)]),
//     which Qwen3's FP8 releases follow with the same four-key config.

// blockFP8 stores a linear as FP8Linear does.
func blockFP8(b *build, name string, s []int64) {
	b.part(name, name, safetensors.F8E4M3, s...)
	b.part(name, module(name)+".weight_scale_inv", safetensors.F32, ceil(s[0], 128), ceil(s[1], 128))
}

func deepseekFP8Config() map[string]any {
	return map[string]any{"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": []int{128, 128}}
}

func TestBlockFP8Formats(t *testing.T) {
	t.Parallel()
	cases := []formatCase{
		{name: "DeepSeek-V3: MLA, dense and MoE layers, BF16 gate, nothing listed", m: deepseekSmall(), qc: deepseekFP8Config(),
			w: blockFP8, kv: "auto", label: "W8A8KV16", format: "w8a8"},
		{name: "Qwen3 FP8", m: qwen3Small.model(), qc: deepseekFP8Config(), w: blockFP8, kv: "fp8", label: "W8A8KV8", format: "w8a8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := analyzeFormat(t, tc)
			require.Equal(t, "block", *got.Quantization.Weights.Strategy)
			require.Equal(t, []any{128.0, 128.0}, got.Quantization.Weights.BlockStructure)
			require.NotNil(t, got.Quantization.Activations)
			require.True(t, got.Quantization.Activations.Dynamic)
			require.Equal(t, ptr(128), got.Quantization.Activations.GroupSize)
			require.Empty(t, got.Quantization.Ignore, "the tools list nothing")
		})
	}
}

// TestUnquantizedModulesDeepSeek: the modules outside the label are
// listed with their kind, count, dtype and bytes, each index collapsed;
// the router keeps its F32 correction bias in its bytes.
func TestUnquantizedModulesDeepSeek(t *testing.T) {
	t.Parallel()
	m := deepseekSmall()
	got, _ := analyzeFormat(t, formatCase{m: m, qc: deepseekFP8Config(), w: blockFP8, kv: "auto", label: "W8A8KV16", format: "w8a8"})
	size := func(names ...string) int64 {
		var n int64
		for _, name := range names {
			st := m.src.Tensors[name]
			n += bytesOf(safetensors.DType(st.DType), st.Shape)
		}
		return n
	}
	layers := func(s string) []string { return []string{"model.layers.0." + s, "model.layers.1." + s} }
	require.Equal(t, []record.UnquantizedModule{
		{Name: "model.embed_tokens", Kind: "embedding", Count: 1, DType: "BF16", Bytes: size("model.embed_tokens.weight")},
		{Name: "lm_head", Kind: "lm_head", Count: 1, DType: "BF16", Bytes: size("lm_head.weight")},
		{Name: "model.layers.*.input_layernorm", Kind: "norm", Count: 2, DType: "BF16", Bytes: size(layers("input_layernorm.weight")...)},
		{Name: "model.layers.*.post_attention_layernorm", Kind: "norm", Count: 2, DType: "BF16", Bytes: size(layers("post_attention_layernorm.weight")...)},
		{Name: "model.layers.*.self_attn.kv_a_layernorm", Kind: "norm", Count: 2, DType: "BF16", Bytes: size(layers("self_attn.kv_a_layernorm.weight")...)},
		{Name: "model.layers.*.self_attn.q_a_layernorm", Kind: "norm", Count: 2, DType: "BF16", Bytes: size(layers("self_attn.q_a_layernorm.weight")...)},
		{Name: "model.norm", Kind: "norm", Count: 1, DType: "BF16", Bytes: size("model.norm.weight")},
		{Name: "model.layers.*.mlp.gate", Kind: "gate", Count: 1, DType: "BF16",
			Bytes: size("model.layers.1.mlp.gate.weight", "model.layers.1.mlp.gate.e_score_correction_bias")},
	}, got.UnquantizedModules)
}

// TestDeepSeekMTPLayer: DeepSeek-V3 appends its multi-token-prediction
// module as the layer after the last (README_WEIGHTS.md: layer
// num_hidden_layers), with an eh_proj and a shared_head left in BF16 and
// its own attention and MLP in FP8. It is no decoder layer: the label stays
// W8A8 and the MTP module's BF16 parts are listed.
func TestDeepSeekMTPLayer(t *testing.T) {
	t.Parallel()
	m := deepseekSmall()
	add := func(name string, shape ...int64) {
		m.src.Tensors[name] = analyze.SourceTensor{DType: "BF16", Shape: shape}
	}
	const p = "model.layers.2."
	var mtpLinears []string
	for name, st := range deepseekSmall().src.Tensors {
		if rest, ok := strings.CutPrefix(name, "model.layers.0."); ok {
			add(p+rest, st.Shape...)
			if len(st.Shape) == 2 {
				mtpLinears = append(mtpLinears, p+rest)
			}
		}
	}
	add(p+"enorm.weight", 64)
	add(p+"hnorm.weight", 64)
	add(p+"eh_proj.weight", 64, 128)
	add(p+"embed_tokens.weight", 256, 64)
	add(p+"shared_head.norm.weight", 64)
	add(p+"shared_head.head.weight", 256, 64)
	quantize := func(name string) bool { return m.decoderOnly(name) || slices.Contains(mtpLinears, name) }
	got, _ := analyzeFormat(t, formatCase{m: m, qc: deepseekFP8Config(), quantize: quantize, w: blockFP8, kv: "auto", label: "W8A8KV16", format: "w8a8"})
	kinds := map[string]string{}
	for _, u := range got.UnquantizedModules {
		kinds[u.Name] = u.Kind
	}
	require.Equal(t, "other", kinds["model.layers.*.eh_proj"])
	require.Equal(t, "other", kinds["model.layers.*.shared_head.head"])
	require.Equal(t, "norm", kinds["model.layers.*.enorm"])
	require.Equal(t, "embedding", kinds["model.layers.*.embed_tokens"])
}
