package analyze

import (
	"github.com/lowbarena/lowbarena/domain/record"
)

// fineGrainedFP8 is the block FP8 of DeepSeek-V3 and Qwen3's FP8 releases,
// as transformers reads and writes it (integrations/finegrained_fp8.py,
// FP8Linear): quantization_config {"quant_method": "fp8", "fmt": "e4m3",
// "activation_scheme": "dynamic", "weight_block_size": [128, 128]}, with
// no list of what it leaves out (the embeddings, lm_head, norms and the
// MoE gate stay BF16). Every quantized linear stores M.weight in F8_E4M3
// and M.weight_scale_inv, F32 [ceil(out/bo), ceil(in/bi)], the scale the
// weight block is multiplied by. Activations are quantized per token and
// per group of bi channels at run time.
var fineGrainedFP8 = &family{
	name:   "fine-grained FP8",
	claims: func(qc map[string]any) bool { return method(qc) == "fp8" },
	parse:  parseFineGrainedFP8,
	weight: []suffix{mod("weight_scale_inv")},
	acts:   []suffix{mod("input_scale")},
}

func parseFineGrainedFP8(qc map[string]any) scheme {
	var s scheme
	w := *fpArgs(8, "tensor", nil, false)
	var groupSize *int
	if bs := qc["weight_block_size"]; bs != nil {
		w.Strategy, w.BlockStructure = strp("block"), bs
		if l, ok := bs.([]any); ok && len(l) == 2 {
			if n, ok := l[1].(float64); ok && n > 0 {
				groupSize = intp(int(n))
			}
		}
	}
	// activation_scheme defaults to dynamic, as in transformers'
	// FineGrainedFP8Config and vLLM's Fp8Config.
	var a *record.QuantArgs
	switch as, _ := qc["activation_scheme"].(string); as {
	case "static":
		a = fpArgs(8, "tensor", nil, false)
	default:
		if groupSize != nil {
			a = fpArgs(8, "group", groupSize, true)
		} else {
			a = fpArgs(8, "token", nil, true)
		}
	}
	s.groups = linearGroup("fp8", w, a)
	s.ignore = stringList(qc["modules_to_not_convert"])
	s.match = matchTransformers
	return s
}
