package analyze

import (
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// bitsAndBytes is bitsandbytes as transformers saves it (quant_method
// "bitsandbytes"; BitsAndBytesConfig.to_dict: load_in_4bit, load_in_8bit,
// bnb_4bit_quant_type, bnb_4bit_use_double_quant, bnb_4bit_quant_storage,
// llm_int8_skip_modules, llm_int8_threshold).
//
// 4-bit (Linear4bit._save_to_state_dict, QuantState.as_dict(packed=True)):
// M.weight holds the flattened values, [(n+1) / (2·s), 1] in the storage
// dtype of s bytes (U8 by default), beside M.weight.absmax (F32, one per
// block of 64, or U8 with double quantization, then with
// M.weight.nested_absmax, F32, and M.weight.nested_quant_map, F32 [256]),
// M.weight.quant_map (F32 [16]) and M.weight.quant_state.bitsandbytes__nf4
// (or __fp4), the packed JSON of the rest.
//
// LLM.int8 (Linear8bitLt._save_to_state_dict): M.weight I8 in the source's
// shape, M.SCB (F32 [out], the row scales) and M.weight_format (U8 scalar,
// 0 for row-major). Its activations run in int8 except outlier columns,
// which run in 16 bits unless llm_int8_threshold is 0.
var bitsAndBytes = &family{
	name: "bitsandbytes",
	claims: func(qc map[string]any) bool {
		return method(qc) == "bitsandbytes" || qc["load_in_4bit"] == true || qc["load_in_8bit"] == true
	},
	parse: parseBitsAndBytes,
	same:  []layout{bnbFlat},
	weight: []suffix{
		ten("absmax"), ten("quant_map"), ten("nested_absmax"), ten("nested_quant_map"),
		ten("quant_state.bitsandbytes__nf4"), ten("quant_state.bitsandbytes__fp4"),
		mod("SCB"), mod("weight_format"),
	},
}

// bnbFlat is Params4bit's storage: [(n+1) / (2·s), 1].
var bnbFlat = layout{name: "bitsandbytes 4-bit", fits: func(src []int64, dt safetensors.DType, got []int64) []int {
	s := dt.Bits() / 8
	if s == 0 || len(got) != 2 || got[1] != 1 {
		return nil
	}
	if got[0] == (numel(src)+1)/(2*s) {
		return []int{4}
	}
	return nil
}}

func parseBitsAndBytes(qc map[string]any) scheme {
	s := scheme{ignore: stringList(qc["llm_int8_skip_modules"]), match: matchTransformers}
	switch {
	case qc["load_in_4bit"] == true || qc["_load_in_4bit"] == true:
		typ, _ := qc["bnb_4bit_quant_type"].(string)
		typ = strings.ToLower(typ)
		if typ != "nf4" {
			typ = "fp4" // BitsAndBytesConfig's default
		}
		w := record.QuantArgs{NumBits: 4, Type: strp(typ), Strategy: strp("group"), GroupSize: intp(64),
			Symmetric: true, ObserverKwargs: map[string]any{}}
		s.groups = linearGroup("bitsandbytes", w, nil)
	case qc["load_in_8bit"] == true || qc["_load_in_8bit"] == true:
		var a *record.QuantArgs
		if t, ok := qc["llm_int8_threshold"].(float64); ok && t == 0 {
			a = intArgs(8, "token", nil)
			a.Dynamic = true
		}
		s.groups = linearGroup("bitsandbytes", *intArgs(8, "channel", nil), a)
	}
	return s
}
