package analyze

import (
	"strings"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// awq is AutoAWQ's format (quant_method "awq"; to_transformers_dict:
// bits, group_size, zero_point, version, modules_to_not_convert). Its two
// linear kernels store the same values in different layouts
// (awq/modules/linear):
//   - WQLinear_GEMM: M.qweight I32 [in, out/(32/b)] (packed along the
//     output dimension), M.qzeros I32 [in/g, out/(32/b)], M.scales F16
//     [in/g, out];
//   - WQLinear_GEMV: M.qweight I32 [out, in/(32/b)] (packed along the
//     input dimension), M.qzeros I32 [out, z] and M.scales F16 [out, 8z],
//     z = calculate_zeros_width(in, g), the group count rounded up to whole
//     words and to a multiple of 4 (g 32) or 2 (g 64).
//
// modules_to_not_convert (null or a list) names modules by substring.
var awq = &family{
	name:   "AutoAWQ",
	claims: func(qc map[string]any) bool { return method(qc) == "awq" },
	parse:  parseAWQ,
	stores: []store{{at: mod("qweight"), layouts: []layout{awqGEMM, awqGEMV}}},
	weight: []suffix{mod("qzeros"), mod("scales")},
}

// awqGEMM is WQLinear_GEMM's qweight: [in, out/(32/b)].
var awqGEMM = layout{name: "AutoAWQ GEMM", fits: func(src []int64, dt safetensors.DType, got []int64) []int {
	if len(src) != 2 || len(got) != 2 || dt != safetensors.I32 || got[0] != src[1] {
		return nil
	}
	return wordPacked(src[0], got[1])
}}

// awqGEMV is WQLinear_GEMV's qweight: [out, in/(32/b)].
var awqGEMV = layout{name: "AutoAWQ GEMV", fits: func(src []int64, dt safetensors.DType, got []int64) []int {
	if len(src) != 2 || len(got) != 2 || dt != safetensors.I32 || got[0] != src[0] {
		return nil
	}
	return wordPacked(src[1], got[1])
}}

// wordPacked returns the widths b that pack n values into k int32 words,
// 32/b whole values per word.
func wordPacked(n, k int64) []int {
	var out []int
	for _, b := range []int64{2, 4, 8} {
		if n%(32/b) == 0 && k == n/(32/b) {
			out = append(out, int(b))
		}
	}
	return out
}

func parseAWQ(qc map[string]any) scheme {
	var s scheme
	s.match = func(_ patterns, pattern, module string) bool { return strings.Contains(module, pattern) }
	s.ignore = stringList(qc["modules_to_not_convert"])
	bits, ok := number(qc, "bits")
	if !ok {
		bits, ok = number(qc, "w_bit")
	}
	if !ok || bits <= 0 || bits > 64 {
		return s
	}
	w := *intArgs(bits, "group", nil)
	g, ok := number(qc, "group_size")
	if !ok {
		g, ok = number(qc, "q_group_size")
	}
	if ok && g > 0 {
		w.GroupSize = intp(g)
	}
	if zp, ok := qc["zero_point"].(bool); ok {
		w.Symmetric = !zp
	}
	switch v, _ := qc["version"].(string); strings.ToLower(v) {
	case "gemm":
		s.layouts = []string{awqGEMM.name}
	case "gemv":
		s.layouts = []string{awqGEMV.name}
	}
	s.groups = linearGroup("awq", w, nil)
	return s
}
