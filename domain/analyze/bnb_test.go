package analyze_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// The bitsandbytes writers these cases follow:
//   - github.com/bitsandbytes-foundation/bitsandbytes at 95f9af3
//     (0.50.2.dev0, 2026-08-19): bitsandbytes/_ops.py (quantize_4bit:
//     values [(n+1) // (2·itemsize), 1] in the quant storage dtype, absmax
//     F32 [ceil(n/blocksize)]), bitsandbytes/functional.py (quantize_4bit
//     with compress_statistics quantizes absmax to U8 in blocks of 256:
//     nested_absmax F32, nested_quant_map F32 [256]; QuantState.as_dict
//     (packed=True): absmax, quant_map, nested_absmax, nested_quant_map and
//     quant_state.bitsandbytes__<type>, the rest packed as JSON bytes) and
//     bitsandbytes/nn/modules.py (Linear4bit._save_to_state_dict puts them
//     under weight.; Linear8bitLt._save_to_state_dict writes SCB and
//     weight_format, U8 0);
//   - transformers' BitsAndBytesConfig.to_dict (utils/quantization_config.py):
//     the config keys below.

// bnbConfig is BitsAndBytesConfig.to_dict.
func bnbConfig(four bool, typ string, double bool, storage string) map[string]any {
	return map[string]any{"_load_in_4bit": four, "_load_in_8bit": !four, "bnb_4bit_compute_dtype": "bfloat16",
		"bnb_4bit_quant_storage": storage, "bnb_4bit_quant_type": typ, "bnb_4bit_use_double_quant": double,
		"llm_int8_enable_fp32_cpu_offload": false, "llm_int8_has_fp16_weight": false, "llm_int8_skip_modules": nil,
		"llm_int8_threshold": 6.0, "load_in_4bit": four, "load_in_8bit": !four, "quant_method": "bitsandbytes"}
}

// bnb4 stores a linear as Linear4bit does: blocks of 64.
func bnb4(typ string, double bool, storage safetensors.DType) writer {
	return func(b *build, name string, s []int64) {
		n := s[0] * s[1]
		blocks := ceil(n, 64)
		b.part(name, name, storage, (n+1)/(2*storage.Bits()/8), 1)
		state := map[string]any{"quant_type": typ, "blocksize": 64, "dtype": "bfloat16", "shape": s}
		if double {
			b.part(name, name+".absmax", safetensors.U8, blocks)
			b.part(name, name+".nested_absmax", safetensors.F32, ceil(blocks, 256))
			b.part(name, name+".nested_quant_map", safetensors.F32, 256)
			state["nested_blocksize"], state["nested_dtype"], state["nested_offset"] = 256, "float32", 0.0123
		} else {
			b.part(name, name+".absmax", safetensors.F32, blocks)
		}
		b.part(name, name+".quant_map", safetensors.F32, 16)
		packed, err := json.Marshal(state)
		if err != nil {
			panic(err)
		}
		b.part(name, fmt.Sprintf("%s.quant_state.bitsandbytes__%s", name, typ), safetensors.U8, int64(len(packed)))
	}
}

// bnb8 stores a linear as Linear8bitLt does.
func bnb8(b *build, name string, s []int64) {
	m := module(name)
	b.part(name, name, safetensors.I8, s...)
	b.part(name, m+".SCB", safetensors.F32, s[0])
	b.part(name, m+".weight_format", safetensors.U8)
}

func TestBitsAndBytesFormats(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	cases := []struct {
		formatCase
		typ string
	}{
		{formatCase{name: "nf4, double quantization", m: q, qc: bnbConfig(true, "nf4", true, "uint8"),
			w: bnb4("nf4", true, safetensors.U8), label: "W4A16KV16", format: "w4a16"}, "nf4"},
		{formatCase{name: "fp4", m: q, qc: bnbConfig(true, "fp4", false, "uint8"),
			w: bnb4("fp4", false, safetensors.U8), label: "W4A16KV16", format: "w4a16"}, "fp4"},
		{formatCase{name: "nf4 stored in bfloat16", m: q, qc: bnbConfig(true, "nf4", true, "bfloat16"),
			w: bnb4("nf4", true, safetensors.BF16), label: "W4A16KV16", format: "w4a16"}, "nf4"},
		{formatCase{name: "LLM.int8: outliers in 16 bits", m: q, qc: bnbConfig(false, "fp4", false, "uint8"),
			w: bnb8, label: "W8A16KV16", format: "w8a16"}, "int"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := analyzeFormat(t, tc.formatCase)
			require.Equal(t, tc.typ, *got.Quantization.Weights.Type)
		})
	}
}

// TestLLMInt8WithoutOutliers: llm_int8_threshold 0 runs every activation
// in int8.
func TestLLMInt8WithoutOutliers(t *testing.T) {
	t.Parallel()
	q := qwen3Small.model()
	qc := bnbConfig(false, "fp4", false, "uint8")
	qc["llm_int8_threshold"] = 0.0
	analyzeFormat(t, formatCase{name: "int8", m: q, qc: qc, w: bnb8, label: "W8A8KV16", format: "w8a8"})
}
