package analyze

import (
	"maps"
	"slices"
)

// compressedTensors is llm-compressor's compressed-tensors format
// (quant_method "compressed-tensors"): config_groups of targets and
// QuantizationArgs, an ignore list, kv_cache_scheme and sparsity_config.
//
// Its compressors (compressed_tensors/compressors/quantized_compressors)
// write:
//   - float-quantized and int-quantized (naive): M.weight in FP8 or INT8
//     in the source's shape;
//   - pack-quantized: M.weight_packed, I32 [out, ceil(in / (32/b))]
//     (pack_to_int32), M.weight_shape (I64 [2]), and for asymmetric group
//     or channel schemes M.weight_zero_point packed along dimension 0,
//     I32 [ceil(out / (32/b)), groups];
//   - nvfp4-pack-quantized and mxfp4-pack-quantized: M.weight_packed, U8
//     [out, in/2], with M.weight_global_scale (F32 [1]) for NVFP4;
//
// and beside them M.weight_scale ([out, 1] per channel, [out, groups] per
// group, [ceil(out/bo), ceil(in/bi)] per block, [1] per tensor; FP8 for
// FP4 schemes, else the weight's dtype), M.weight_g_idx (I32 [in]) for
// group activation ordering, and input_scale, input_global_scale,
// input_zero_point, output_scale for static activations. A KV cache
// scheme adds self_attn.k_scale and self_attn.v_scale.
var compressedTensors = &family{
	name: "compressed-tensors",
	claims: func(qc map[string]any) bool {
		return qc["config_groups"] != nil || method(qc) == "compressed-tensors"
	},
	parse: parseCompressedTensors,
	same:  []layout{lastDimPacked},
	stores: []store{
		{at: mod("weight_packed"), layouts: []layout{lastDimPacked}},
	},
	weight: []suffix{mod("weight_scale"), mod("weight_global_scale"), mod("weight_zero_point"), mod("weight_shape"), mod("weight_g_idx")},
	acts:   []suffix{mod("input_scale"), mod("input_global_scale"), mod("input_zero_point"), mod("output_scale"), mod("output_zero_point")},
}

func parseCompressedTensors(qc map[string]any) scheme {
	var s scheme
	groups, _ := qc["config_groups"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		g, ok := groups[name].(map[string]any)
		if !ok {
			continue
		}
		w, ok := quantArgs(g["weights"])
		if !ok {
			continue
		}
		gr := group{name: name, targets: stringList(g["targets"]), weights: w}
		if a, ok := quantArgs(g["input_activations"]); ok {
			gr.acts = &a
		}
		s.groups = append(s.groups, gr)
	}
	s.ignore = stringList(qc["ignore"])
	if kv, ok := quantArgs(qc["kv_cache_scheme"]); ok {
		s.kvBits = intp(kv.NumBits)
	}
	if sp, ok := qc["sparsity_config"].(map[string]any); ok {
		f, _ := sp["format"].(string)
		s.sparse = f != "" && f != "dense"
	}
	return s
}
