package analyze_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// The MXFP4 writer these cases follow is gpt-oss' layout as
// github.com/huggingface/transformers at 0189b1d reads it,
// src/transformers/integrations/mxfp4.py: Mxfp4GptOssExperts holds
// gate_up_proj_blocks U8 [E, 2·inter, hidden/32, 16], gate_up_proj_scales
// U8 [E, 2·inter, hidden/32], down_proj_blocks U8 [E, hidden, inter/32, 16]
// and down_proj_scales U8 [E, hidden, inter/32], the biases beside them;
// convert_moe_packed_tensors transposes the blocks back to the BF16
// gate_up_proj [E, hidden, 2·inter]. gpt-oss' config.json says
// {"modules_to_not_convert": ["model.layers.*.self_attn",
// "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
// "quant_method": "mxfp4"}.

// mxfp4Experts stores a fused expert projection [E, in, out] as blocks of
// 32 FP4 values and their E8M0 scales.
func mxfp4Experts(b *build, name string, s []int64) {
	e, in, out := s[0], s[1], s[2]
	b.part(name, name+"_blocks", safetensors.U8, e, out, in/32, 16)
	b.part(name, name+"_scales", safetensors.U8, e, out, in/32)
}

func gptOSSConfig() map[string]any {
	return map[string]any{"modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"},
		"quant_method": "mxfp4"}
}

// TestMXFP4Format: gpt-oss keeps its attention in BF16, and its attention
// projections are decoder linears, so the label is W16A16 whatever the
// experts hold; bits_per_weight says how little the decoder stores (4.25
// bits on the experts).
func TestMXFP4Format(t *testing.T) {
	t.Parallel()
	m := gptOSSSmall()
	experts := func(name string) bool {
		return strings.HasSuffix(name, "experts.gate_up_proj") || strings.HasSuffix(name, "experts.down_proj")
	}
	got, b := analyzeFormat(t, formatCase{name: "gpt-oss", m: m, qc: gptOSSConfig(), quantize: experts, w: mxfp4Experts,
		label: "W16A16KV16", format: "w4a16"})
	require.Less(t, b.bpw(m), 16.0)
	require.Equal(t, ptr(32), got.Quantization.Weights.GroupSize)
	kinds := map[string]int{}
	for _, u := range got.UnquantizedModules {
		kinds[u.Kind] += u.Count
	}
	require.Equal(t, map[string]int{"embedding": 1, "lm_head": 1, "norm": 5, "gate": 2}, kinds, "the routers are gates")

	// Declared W4A16, it is refused on W: the BF16 attention.
	got = analyzeBuild(t, m, b, gptOSSConfig(), "W4A16KV16")
	require.Equal(t, []string{"precision_wider_than_declared"}, codes(got))
	require.Contains(t, got.Violations[0].Message, "W (16 > 4)")
}
