package analyze_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// The AutoAWQ writers these cases follow are those of
// github.com/casper-hansen/AutoAWQ at v0.2.9 (88e4c76, 2025-05-11):
//   - awq/modules/linear/gemm.py, WQLinear_GEMM: qweight I32
//     [in, out // (32 // w_bit)], qzeros I32 [in // g, out // (32 // w_bit)],
//     scales F16 [in // g, out];
//   - awq/modules/linear/gemv.py, WQLinear_GEMV: qweight I32
//     [out, in // (32 // w_bit)], qzeros I32 [out, calculate_zeros_width(in, g)],
//     scales F16 [out, calculate_zeros_width(in, g) · (32 // w_bit)];
//   - awq/models/_config.py, to_transformers_dict: quant_method, zero_point,
//     group_size, bits, version, modules_to_not_convert (null unless set).

// awqZerosWidth is calculate_zeros_width: the group count in whole words
// of 8, rounded up to a multiple of 4 for groups of 32, 2 for 64.
func awqZerosWidth(in, g int64) int64 {
	mult := map[int64]int64{32: 4, 64: 2}[g]
	if mult == 0 {
		mult = 1
	}
	w := ceil(in/g, 8)
	return ceil(w, mult) * mult
}

func awqGEMM(g int64) writer {
	return func(b *build, name string, s []int64) {
		m := module(name)
		out, in := s[0], s[1]
		b.part(name, m+".qweight", safetensors.I32, in, out/8)
		b.part(name, m+".qzeros", safetensors.I32, in/g, out/8)
		b.part(name, m+".scales", safetensors.F16, in/g, out)
	}
}

func awqGEMV(g int64) writer {
	return func(b *build, name string, s []int64) {
		m := module(name)
		out, in := s[0], s[1]
		z := awqZerosWidth(in, g)
		b.part(name, m+".qweight", safetensors.I32, out, in/8)
		b.part(name, m+".qzeros", safetensors.I32, out, z)
		b.part(name, m+".scales", safetensors.F16, out, 8*z)
	}
}

func awqConfig(version string, g int) map[string]any {
	return map[string]any{"quant_method": "awq", "zero_point": true, "group_size": g, "bits": 4, "version": version,
		"modules_to_not_convert": nil}
}

func TestAWQFormats(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	cases := []formatCase{
		{name: "GEMM group 32", m: q, qc: awqConfig("gemm", 32), w: awqGEMM(32), label: "W4A16KV16", format: "w4a16"},
		{name: "GEMM group 64", m: q, qc: awqConfig("gemm", 64), w: awqGEMM(64), label: "W4A16KV16", format: "w4a16"},
		{name: "GEMV group 32: zeros rounded up to four words", m: q, qc: awqConfig("gemv", 32), w: awqGEMV(32), label: "W4A16KV16", format: "w4a16"},
		{name: "GEMV group 64", m: q, qc: awqConfig("gemv", 64), w: awqGEMV(64), label: "W4A16KV16", format: "w4a16"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := analyzeFormat(t, tc)
			require.False(t, got.Quantization.Weights.Symmetric, "zero_point true is asymmetric")
			require.Empty(t, got.Quantization.Ignore, "modules_to_not_convert null")
		})
	}
}

// TestAWQVersionDecides: the two layouts of the same values are told
// apart by the config's version. The decoder's square projections look
// alike in both, but the MLP's do not: a GEMV checkpoint that says gemm
// has the wrong shape, and so does a GEMM one that says gemv.
func TestAWQVersionDecides(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	for _, tc := range []struct {
		name    string
		version string
		w       writer
	}{
		{"GEMV tensors, gemm config", "gemm", awqGEMV(32)},
		{"GEMM tensors, gemv config", "gemv", awqGEMM(32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := write(q, q.decoderOnly, tc.w)
			got := analyzeBuild(t, q, b, awqConfig(tc.version, 32), "W4A16KV16")
			require.Equal(t, []string{"shape_mismatch"}, codes(got))
			require.Contains(t, got.Violations[0].Message, "mlp.down_proj.qweight")
		})
	}
}
