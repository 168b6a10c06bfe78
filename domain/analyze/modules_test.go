package analyze_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// TestTowersAreOutsideTheLabel: a Qwen3.5-style model whose decoder
// (gated delta-net and attention layers) is NVFP4 while its vision tower,
// its MTP head and lm_head stay BF16, none of them listed anywhere, reads
// W4A4: the towers are reported as unquantized modules of kind other,
// beside the linear attention's conv1d, a rank-3 weight that is no
// linear.
func TestTowersAreOutsideTheLabel(t *testing.T) {
	t.Parallel()
	m := qwen35Small.model()
	qc := ctConfig("nvfp4-pack-quantized", qargs(4, "float", "tensor_group", 16, true, false), qargs(4, "float", "tensor_group", 16, true, "local"), nil)
	qc["ignore"] = []string{}
	got, _ := analyzeFormat(t, formatCase{m: m, qc: qc, w: ctNVFP4Writer, kv: "fp8", label: "W4A4KV8", format: "w4a4"})
	other := map[string]int{}
	for _, u := range got.UnquantizedModules {
		if u.Kind == analyze.KindOther {
			other[u.Name] = u.Count
		}
	}
	require.Equal(t, map[string]int{"model.visual.blocks.*.attn.qkv": 1, "mtp.fc": 1, "model.language_model.layers.*.linear_attn.conv1d": 3}, other)
}

// TestLayoutWithoutNumberedLayers: a model whose linears sit in no
// numbered layer still has a label; every linear but lm_head counts.
func TestLayoutWithoutNumberedLayers(t *testing.T) {
	t.Parallel()
	m := model{src: &analyze.TensorIndex{Tensors: map[string]analyze.SourceTensor{
		"embed.weight":   {DType: "BF16", Shape: []int64{256, 64}},
		"proj.weight":    {DType: "BF16", Shape: []int64{64, 64}},
		"out.weight":     {DType: "BF16", Shape: []int64{64, 64}},
		"lm_head.weight": {DType: "BF16", Shape: []int64{256, 64}},
	}}, decoder: []string{"out.weight", "proj.weight"}}
	for _, tc := range []struct {
		name  string
		w     writer
		label string
	}{
		{"FP8", blockFP8, "W8A8KV16"},
		{"one left in BF16", func(b *build, name string, s []int64) {
			if strings.HasPrefix(name, "out") {
				b.part(name, name, safetensors.BF16, s...)
				return
			}
			blockFP8(b, name, s)
		}, "W16A16KV16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			analyzeFormat(t, formatCase{m: m, qc: deepseekFP8Config(), w: tc.w, label: tc.label, format: "w8a8"})
		})
	}
}
