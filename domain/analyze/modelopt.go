package analyze

import (
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
)

// HFQuantConfigFile is ModelOpt's own quantization config, written beside
// config.json by every ModelOpt export and, before ModelOpt put a
// quantization_config into config.json, the only place the scheme is said.
const HFQuantConfigFile = "hf_quant_config.json"

// modelOpt is NVIDIA TensorRT Model Optimizer's unified Hugging Face
// export (modelopt/torch/export/unified_export_hf.py). It writes
// hf_quant_config.json, {"producer": {"name": "modelopt"}, "quantization":
// {"quant_algo", "kv_cache_quant_algo", "group_size", "exclude_modules"}},
// and, since 0.29, the same in config.json's quantization_config
// (convert_hf_quant_config_format: quant_method "modelopt", quant_algo,
// config_groups, ignore, kv_cache_scheme).
//
// Tensors: NVFP4 stores M.weight as U8 [out, in/2] with M.weight_scale
// (F8_E4M3 [out, in/16]), M.weight_scale_2 (F32 scalar) and
// M.input_scale (F32 scalar); FP8 stores M.weight as F8_E4M3 with scalar
// M.weight_scale and M.input_scale; AWQ schemes add M.pre_quant_scale. A
// KV cache scheme adds self_attn.k_proj.k_scale and v_proj.v_scale.
var modelOpt = &family{
	name: "ModelOpt",
	claims: func(qc map[string]any) bool {
		if method(qc) == "modelopt" || qc["quant_algo"] != nil {
			return true
		}
		q, ok := qc["quantization"].(map[string]any)
		return ok && q["quant_algo"] != nil
	},
	parse:  parseModelOpt,
	same:   []layout{lastDimPacked},
	weight: []suffix{mod("weight_scale"), mod("weight_scale_2")},
	acts:   []suffix{mod("input_scale"), mod("pre_quant_scale")},
}

// modelOptAlgos maps ModelOpt's quant_algo to its weight and activation
// schemes.
var modelOptAlgos = map[string]struct{ w, a *record.QuantArgs }{
	"FP8":                        {fpArgs(8, "tensor", nil, false), fpArgs(8, "tensor", nil, false)},
	"FP8_PER_CHANNEL_PER_TOKEN":  {fpArgs(8, "channel", nil, false), fpArgs(8, "token", nil, true)},
	"FP8_PB_WO":                  {fpArgs(8, "block", nil, false), nil},
	"NVFP4":                      {fpArgs(4, "tensor_group", intp(16), false), fpArgs(4, "tensor_group", intp(16), true)},
	"NVFP4_AWQ":                  {fpArgs(4, "tensor_group", intp(16), false), fpArgs(4, "tensor_group", intp(16), true)},
	"W4A8_AWQ":                   {intArgs(4, "group", intp(128)), fpArgs(8, "tensor", nil, false)},
	"W4A16_AWQ":                  {intArgs(4, "group", intp(128)), nil},
	"INT4_AWQ":                   {intArgs(4, "group", intp(128)), nil},
	"W8A8_SQ_PER_CHANNEL":        {intArgs(8, "channel", nil), intArgs(8, "tensor", nil)},
	"INT8_SQ":                    {intArgs(8, "channel", nil), intArgs(8, "tensor", nil)},
	"W8A16":                      {intArgs(8, "channel", nil), nil},
	"W4A8_NVFP4_FP8":             {fpArgs(4, "tensor_group", intp(16), false), fpArgs(8, "tensor", nil, false)},
	"W4A8_MXFP4_FP8":             {fpArgs(4, "group", intp(32), false), fpArgs(8, "tensor", nil, false)},
	"MXFP8":                      {fpArgs(8, "group", intp(32), false), fpArgs(8, "group", intp(32), true)},
	"MXFP4":                      {fpArgs(4, "group", intp(32), false), fpArgs(4, "group", intp(32), true)},
	"FP8_PER_TENSOR_PER_CHANNEL": {fpArgs(8, "channel", nil, false), fpArgs(8, "tensor", nil, false)},
}

// kvAlgoBits maps ModelOpt's kv_cache_quant_algo to its width.
var kvAlgoBits = map[string]int{"FP8": 8, "NVFP4": 4, "NVFP4_AFFINE": 4, "INT8": 8, "FP8_E4M3": 8}

// parseModelOpt reads either layout: hf_quant_config.json's (the scheme
// under "quantization") or config.json's (flat, with ignore and
// kv_cache_scheme in compressed-tensors' words).
func parseModelOpt(qc map[string]any) scheme {
	if nested, ok := qc["quantization"].(map[string]any); ok {
		qc = nested
	}
	var s scheme
	algo, _ := qc["quant_algo"].(string)
	if a, ok := modelOptAlgos[strings.ToUpper(algo)]; ok {
		w := *a.w
		if g, ok := number(qc, "group_size"); ok && w.GroupSize != nil {
			w.GroupSize = intp(g)
		}
		s.groups = linearGroup("modelopt", w, a.a)
	}
	s.ignore = stringList(qc["exclude_modules"])
	if s.ignore == nil {
		s.ignore = stringList(qc["ignore"])
	}
	switch kv := qc["kv_cache_quant_algo"].(type) {
	case string:
		if b, ok := kvAlgoBits[strings.ToUpper(kv)]; ok {
			s.kvBits = intp(b)
		}
	}
	if s.kvBits == nil {
		switch kv := qc["kv_cache_scheme"].(type) {
		case string:
			if b, ok := kvAlgoBits[strings.ToUpper(kv)]; ok {
				s.kvBits = intp(b)
			}
		case map[string]any:
			if b, ok := number(kv, "num_bits"); ok && b > 0 {
				s.kvBits = intp(b)
			}
		}
	}
	return s
}
