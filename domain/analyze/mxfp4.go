package analyze

import (
	"slices"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// mxfp4 is gpt-oss' MXFP4 (quant_method "mxfp4", transformers'
// integrations/mxfp4.py): the MoE experts' fused projections, source
// experts.gate_up_proj [E, in, out] and experts.down_proj, are stored as
// experts.gate_up_proj_blocks, U8 [E, out, in/32, 16] (32 FP4 values, two
// per byte, per block), and experts.gate_up_proj_scales, U8 [E, out,
// in/32] (E8M0 exponents); the biases stay beside them.
// modules_to_not_convert lists what stays BF16: attention, the router,
// the embeddings and lm_head.
var mxfp4 = &family{
	name:   "MXFP4",
	claims: func(qc map[string]any) bool { return method(qc) == "mxfp4" },
	parse:  parseMXFP4,
	stores: []store{{at: param("_blocks"), layouts: []layout{mxfp4Blocks}}},
	weight: []suffix{param("_scales")},
}

// mxfp4Blocks is [..., out, in/32, 16] U8 for a source [..., in, out].
var mxfp4Blocks = layout{name: "MXFP4 blocks", fits: func(src []int64, dt safetensors.DType, got []int64) []int {
	r := len(src)
	if dt != safetensors.U8 || r < 2 || len(got) != r+1 || src[r-2]%32 != 0 {
		return nil
	}
	want := append(slices.Clone(src[:r-2]), src[r-1], src[r-2]/32, 16)
	if slices.Equal(want, got) {
		return []int{4}
	}
	return nil
}}

func parseMXFP4(qc map[string]any) scheme {
	return scheme{
		groups: linearGroup("mxfp4", *fpArgs(4, "group", intp(32), false), nil),
		ignore: stringList(qc["modules_to_not_convert"]),
		match:  matchTransformers,
	}
}
