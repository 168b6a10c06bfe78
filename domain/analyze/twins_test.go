package analyze_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// TestDishonestTwins: beside each honest format, a checkpoint that says
// one thing and stores another is refused with its code, and the
// violation names what gave it away.
func TestDishonestTwins(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	ds := deepseekSmall()
	bf16 := func(b *build, name string, s []int64) { b.part(name, name, safetensors.BF16, s...) }
	except := func(w writer, skip string) writer {
		return func(b *build, name string, s []int64) {
			if name == skip {
				bf16(b, name, s)
				return
			}
			w(b, name, s)
		}
	}
	gptq8As4 := func(b *build, name string, s []int64) { gptqWriter(8, 32, safetensors.I32)(b, name, s) }
	// A GPTQ qweight at 3 bits packed ten values a word, as if 32/3 fit.
	gptq3By10 := func(b *build, name string, s []int64) {
		m := module(name)
		b.part(name, m+".qweight", safetensors.I32, ceil(s[1], 10), s[0])
		b.part(name, m+".qzeros", safetensors.I32, s[1]/32, ceil(s[0]*3, 32))
		b.part(name, m+".scales", safetensors.F16, s[1]/32, s[0])
		b.part(name, m+".g_idx", safetensors.I32, s[1])
	}
	ignoring := func(qc map[string]any, key string, list ...string) map[string]any {
		qc[key] = list
		return qc
	}
	cases := []struct {
		name     string
		m        model
		qc       map[string]any
		w        writer
		declared string
		codes    []string
		says     string
	}{
		// A quantization config over 16-bit tensors.
		{"GPTQ config over BF16", q, autoGPTQConfig(4, 32, false, true), bf16, "W4A16KV16",
			[]string{"precision_wider_than_declared"}, "W (16 > 4)"},
		{"bitsandbytes nf4 config over BF16", q, bnbConfig(true, "nf4", true, "uint8"), bf16, "W4A16KV16",
			[]string{"precision_wider_than_declared"}, "W (16 > 4)"},
		{"DeepSeek fp8 config over BF16", ds, deepseekFP8Config(), bf16, "W8A8KV16",
			[]string{"precision_wider_than_declared"}, "W (16 > 8), A (16 > 8)"},
		{"ModelOpt NVFP4 config over BF16", q, modelOptConfig("NVFP4", false), bf16, "W4A4KV16",
			[]string{"precision_wider_than_declared"}, "W (16 > 4), A (16 > 4)"},

		// A config whose bits disagree with the packing.
		{"GPTQ says 4 bits, qweight packs 8", q, autoGPTQConfig(4, 32, false, true), gptq8As4, "W4A16KV16",
			[]string{"packing_mismatch", "precision_wider_than_declared"}, "model.layers.0.mlp.down_proj.qweight is I32[32 64], 8 bits per weight of the source [64 128], where the config says 4"},
		{"AutoAWQ says 4 bits, GEMM qweight packs 8", q, awqConfig("gemm", 32),
			func(b *build, name string, s []int64) {
				m := module(name)
				b.part(name, m+".qweight", safetensors.I32, s[1], s[0]/4)
				b.part(name, m+".qzeros", safetensors.I32, s[1]/32, s[0]/4)
				b.part(name, m+".scales", safetensors.F16, s[1]/32, s[0])
			}, "W4A16KV16", []string{"packing_mismatch", "precision_wider_than_declared"}, "where the config says 4"},
		{"compressed-tensors says 4 bits, weight_packed packs 8", q,
			ctConfig("pack-quantized", qargs(4, "int", "group", 32, true, false), nil, nil), ctPacked(8, 32, true, false), "W4A16KV16",
			[]string{"packing_mismatch", "precision_wider_than_declared"}, "weight_packed is I32[128 16]"},
		{"ModelOpt says NVFP4, stores FP8", q, modelOptConfig("NVFP4", false), modelOptFP8, "W4A4KV16",
			[]string{"packing_mismatch", "precision_wider_than_declared"}, "is F8_E4M3[128 64], 8 bits per weight"},
		{"bitsandbytes says 4 bits, stores int8", q, bnbConfig(true, "nf4", false, "uint8"), bnb8, "W4A16KV16",
			[]string{"packing_mismatch", "precision_wider_than_declared"}, "where the config says 4"},
		{"GPTQ 3 bits packed ten a word is no GPTQ layout", q, autoGPTQConfig(3, 32, false, true), gptq3By10, "W3A16KV16",
			[]string{"precision_wider_than_declared", "shape_mismatch"}, "model.layers.0.mlp.down_proj.qweight is I32[13 64], in no GPTQ layout"},

		// A scheme that lists a decoder linear it does not store quantized.
		{"compressed-tensors ignores a q_proj it keeps in BF16", q,
			ignoring(ctConfig("nvfp4-pack-quantized", qargs(4, "float", "tensor_group", 16, true, false), qargs(4, "float", "tensor_group", 16, true, "local"), nil),
				"ignore", "lm_head", "model.layers.0.self_attn.q_proj"),
			except(ctNVFP4Writer, "model.layers.0.self_attn.q_proj.weight"), "W4A4KV16",
			[]string{"precision_wider_than_declared"}, "W (16 > 4), A (16 > 4)"},
		{"fine-grained fp8 leaves mlp.down_proj out", q, ignoring(deepseekFP8Config(), "modules_to_not_convert", "model.layers.1.mlp.down_proj"),
			except(blockFP8, "model.layers.1.mlp.down_proj.weight"), "W8A8KV16",
			[]string{"precision_wider_than_declared"}, "W (16 > 8), A (16 > 8)"},
		{"AutoAWQ skips o_proj", q, ignoring(awqConfig("gemm", 32), "modules_to_not_convert", "o_proj"),
			func(b *build, name string, s []int64) {
				if module(name) == "model.layers.0.self_attn.o_proj" || module(name) == "model.layers.1.self_attn.o_proj" {
					bf16(b, name, s)
					return
				}
				awqGEMM(32)(b, name, s)
			}, "W4A16KV16", []string{"precision_wider_than_declared"}, "W (16 > 4)"},
		// And one it does not list: an expert left in BF16 under DeepSeek's
		// config, which lists nothing.
		{"DeepSeek fp8 with one expert in BF16", ds, deepseekFP8Config(),
			except(blockFP8, "model.layers.1.mlp.experts.1.down_proj.weight"), "W8A8KV16",
			[]string{"precision_wider_than_declared"}, "W (16 > 8), A (16 > 8)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := analyzeBuild(t, tc.m, write(tc.m, tc.m.decoderOnly, tc.w), tc.qc, tc.declared)
			require.False(t, got.OK)
			require.Equal(t, tc.codes, codes(got), "%v", got.Violations)
			found := false
			for _, v := range got.Violations {
				found = found || strings.Contains(v.Message, tc.says)
			}
			require.True(t, found, "a violation says %q: %v", tc.says, got.Violations)
		})
	}
}
