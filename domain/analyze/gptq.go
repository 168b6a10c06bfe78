package analyze

import (
	"maps"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// gptq is AutoGPTQ's and GPTQModel's format (quant_method "gptq",
// checkpoint_format or format "gptq" or "gptq_v2"). Every quantized
// linear M stores, transposed against the source's [out, in]:
//   - M.qweight: [ceil(in·b / w), out] words of w bits (I32 in AutoGPTQ;
//     GPTQModel's pack_dtype may be int8, int16, int32 or int64), the b-bit
//     values of a column packed as one bit stream along the input
//     dimension, so 3 bits fill three words with 32 values
//     (in/32·3 rows), not 32/3 per word;
//   - M.qzeros: [ceil(in/g), ceil(out·b / w)], M.scales: [ceil(in/g), out]
//     F16 (g the group size, in when it is -1), M.g_idx: I32 [in], the
//     group of each input channel (permuted when desc_act is true).
//
// GPTQModel's dynamic map overrides the scheme per module: "+:re" (or a
// bare regular expression) gives the modules it matches their own bits
// and group size, "-:re" leaves them unquantized.
var gptq = &family{
	name:   "GPTQ",
	claims: func(qc map[string]any) bool { return method(qc) == "gptq" },
	parse:  parseGPTQ,
	stores: []store{{at: mod("qweight"), layouts: []layout{gptqLayout}}},
	weight: []suffix{mod("qzeros"), mod("scales"), mod("g_idx")},
}

// gptqLayout is GPTQ's qweight: [ceil(in·b / w), out] in w-bit words.
var gptqLayout = layout{name: "GPTQ", fits: func(src []int64, dt safetensors.DType, got []int64) []int {
	if len(src) != 2 || len(got) != 2 || got[1] != src[0] {
		return nil
	}
	var w int64
	switch dt {
	case safetensors.I8, safetensors.I16, safetensors.I32, safetensors.I64, safetensors.U32:
		w = dt.Bits()
	default:
		return nil
	}
	var out []int
	for b := int64(2); b <= 8; b++ {
		if got[0] == ceilDiv(src[1]*b, w) {
			out = append(out, int(b))
		}
	}
	return out
}}

func parseGPTQ(qc map[string]any) scheme {
	var s scheme
	s.match = matchTransformers
	s.ignore = stringList(qc["modules_to_not_convert"])
	base, ok := gptqArgs(qc, nil)
	if !ok {
		return s
	}
	dyn, _ := qc["dynamic"].(map[string]any)
	for _, key := range slices.Sorted(maps.Keys(dyn)) {
		pattern, skip := strings.CutPrefix(key, "-:")
		if skip {
			s.ignore = append(s.ignore, pattern)
			continue
		}
		pattern = strings.TrimPrefix(pattern, "+:")
		over, _ := dyn[key].(map[string]any)
		if w, ok := gptqArgs(over, &base); ok {
			s.groups = append(s.groups, group{name: "dynamic " + key, targets: []string{"re:" + pattern}, weights: w})
		}
	}
	s.groups = append(s.groups, linearGroup("gptq", base, nil)...)
	return s
}

// gptqArgs reads bits, group_size, sym and desc_act, over a base scheme
// when given (GPTQModel's dynamic overrides).
func gptqArgs(qc map[string]any, base *record.QuantArgs) (record.QuantArgs, bool) {
	var w record.QuantArgs
	if base != nil {
		w = *base
	} else {
		w = *intArgs(0, "group", nil)
	}
	if b, ok := number(qc, "bits"); ok {
		w.NumBits = b
	}
	if w.NumBits <= 0 || w.NumBits > 64 {
		return record.QuantArgs{}, false
	}
	if g, ok := number(qc, "group_size"); ok {
		if g <= 0 {
			w.Strategy, w.GroupSize = strp("channel"), nil
		} else {
			w.Strategy, w.GroupSize = strp("group"), intp(g)
		}
	}
	if sym, ok := qc["sym"].(bool); ok {
		w.Symmetric = sym
	}
	if desc, ok := qc["desc_act"].(bool); ok {
		w.ActOrder = nil
		if desc {
			w.ActOrder = "group"
		}
	}
	return w, true
}
