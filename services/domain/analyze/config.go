package analyze

import (
	"bytes"
	"encoding/json"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/services/domain/record"
)

// MaxConfigSize bounds a config.json (a real one is a few kilobytes; a
// quantization ignore list can make it a few hundred).
const MaxConfigSize = 8 << 20

func parseConfig(data []byte) (map[string]any, error) {
	if len(data) > MaxConfigSize {
		return nil, fail(CodeConfigInvalid, nil, "config.json is %d bytes, over the limit of %d", len(data), MaxConfigSize)
	}
	var cfg map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&cfg); err != nil || cfg == nil {
		return nil, fail(CodeConfigInvalid, err, "config.json is not a JSON object")
	}
	if dec.More() {
		return nil, fail(CodeConfigInvalid, nil, "config.json holds data after its object")
	}
	return cfg, nil
}

// textConfig returns the part of a config that describes the language
// model: text_config for multimodal models, else the config itself.
func textConfig(cfg map[string]any) map[string]any {
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		return tc
	}
	return cfg
}

// ropeOf reads the rotary embedding: rope_theta, and rope_scaling (legacy)
// or rope_parameters (transformers 5); the type is rope_type (or type) from
// either, "default" when none. Scaling keeps every other key of either
// object, so a changed factor or mrope section is a changed rope.
func ropeOf(cfg map[string]any) record.Rope {
	c := cfg
	if _, ok := c["rope_theta"]; !ok {
		if _, ok := c["rope_parameters"]; !ok {
			c = textConfig(cfg)
		}
	}
	r := record.Rope{RopeType: "default"}
	if v, ok := c["rope_theta"].(float64); ok {
		r.RopeTheta = v
	}
	scaling := map[string]any{}
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		m, ok := c[key].(map[string]any)
		if !ok {
			continue
		}
		for k, v := range m {
			switch k {
			case "rope_theta":
				if f, ok := v.(float64); ok {
					r.RopeTheta = f
				}
			case "rope_type", "type":
				if s, ok := v.(string); ok {
					r.RopeType = s
				}
			default:
				scaling[k] = v
			}
		}
	}
	if len(scaling) > 0 {
		r.RopeScaling = scaling
	}
	return r
}

// scheme is what the contract reads from a quantization_config.
type scheme struct {
	// recognized is true when a weight scheme was understood.
	recognized bool
	groups     []group
	ignore     []string
	kvBits     *int
	sparse     bool
}

// group is one quantization group: the modules it targets and its schemes.
type group struct {
	name    string
	targets []string
	weights record.QuantArgs
	acts    *record.QuantArgs
}

func intp(v int) *int       { return &v }
func strp(v string) *string { return &v }

// quantArgs decodes a compressed-tensors QuantizationArgs object. A
// "dynamic": "local" (NVFP4 activations) reads as dynamic true.
func quantArgs(v any) (record.QuantArgs, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return record.QuantArgs{}, false
	}
	var q record.QuantArgs
	if n, ok := m["num_bits"].(float64); ok {
		q.NumBits = int(n)
	}
	if q.NumBits <= 0 || q.NumBits > 64 {
		return record.QuantArgs{}, false
	}
	q.ActOrder = m["actorder"]
	q.BlockStructure = m["block_structure"]
	switch d := m["dynamic"].(type) {
	case bool:
		q.Dynamic = d
	case string:
		q.Dynamic = d != "" && d != "false"
	}
	if g, ok := m["group_size"].(float64); ok {
		q.GroupSize = intp(int(g))
	}
	if s, ok := m["observer"].(string); ok {
		q.Observer = &s
	}
	q.ObserverKwargs = map[string]any{}
	if kw, ok := m["observer_kwargs"].(map[string]any); ok {
		q.ObserverKwargs = kw
	}
	if s, ok := m["strategy"].(string); ok {
		q.Strategy = &s
	}
	q.Symmetric, _ = m["symmetric"].(bool)
	if s, ok := m["type"].(string); ok {
		q.Type = &s
	}
	return q, true
}

func stringList(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, e := range l {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
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

func fpArgs(bits int, strategy string, groupSize *int, dynamic bool) *record.QuantArgs {
	return &record.QuantArgs{NumBits: bits, Type: strp("float"), Strategy: strp(strategy), GroupSize: groupSize,
		Symmetric: true, Dynamic: dynamic, ObserverKwargs: map[string]any{}}
}

func intArgs(bits int, strategy string, groupSize *int) *record.QuantArgs {
	return &record.QuantArgs{NumBits: bits, Type: strp("int"), Strategy: strp(strategy), GroupSize: groupSize,
		Symmetric: true, ObserverKwargs: map[string]any{}}
}

var kvAlgoBits = map[string]int{"FP8": 8, "NVFP4": 4, "INT8": 8, "FP8_E4M3": 8}

// schemeOf reads a config's quantization_config. It understands
// compressed-tensors (config_groups, ignore, kv_cache_scheme,
// sparsity_config), ModelOpt (quant_algo, kv_cache_quant_algo,
// exclude_modules; flat or under "quantization"), transformers' fine-grained
// fp8 (activation_scheme, modules_to_not_convert) and GPTQ/AWQ (bits,
// group_size, sym). Anything else is an unrecognised scheme, which leaves
// the reading to the tensors.
func schemeOf(cfg map[string]any) scheme {
	qc, ok := cfg["quantization_config"].(map[string]any)
	if !ok {
		qc, ok = textConfig(cfg)["quantization_config"].(map[string]any)
	}
	if !ok {
		return scheme{}
	}
	if nested, ok := qc["quantization"].(map[string]any); ok {
		qc = nested // ModelOpt's hf_quant_config layout
	}
	var s scheme
	method, _ := qc["quant_method"].(string)
	switch {
	case qc["config_groups"] != nil || method == "compressed-tensors":
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
	case qc["quant_algo"] != nil || method == "modelopt":
		algo, _ := qc["quant_algo"].(string)
		if a, ok := modelOptAlgos[strings.ToUpper(algo)]; ok {
			w := *a.w
			if g, ok := qc["group_size"].(float64); ok && w.GroupSize != nil {
				w.GroupSize = intp(int(g))
			}
			s.groups = []group{{name: "modelopt", targets: []string{"Linear"}, weights: w, acts: a.a}}
		}
		s.ignore = stringList(qc["exclude_modules"])
		if kv, ok := qc["kv_cache_quant_algo"].(string); ok {
			if b, ok := kvAlgoBits[strings.ToUpper(kv)]; ok {
				s.kvBits = intp(b)
			}
		}
	case method == "fp8":
		w := *fpArgs(8, "tensor", nil, false)
		if bs := qc["weight_block_size"]; bs != nil {
			w.Strategy, w.BlockStructure = strp("block"), bs
		}
		var a *record.QuantArgs
		if as, _ := qc["activation_scheme"].(string); as == "dynamic" || as == "static" {
			a = fpArgs(8, "token", nil, as == "dynamic")
		}
		s.groups = []group{{name: "fp8", targets: []string{"Linear"}, weights: w, acts: a}}
		s.ignore = stringList(qc["modules_to_not_convert"])
	case method == "gptq" || method == "awq":
		if b, ok := qc["bits"].(float64); ok && b > 0 && b <= 64 {
			w := *intArgs(int(b), "group", nil)
			if g, ok := qc["group_size"].(float64); ok {
				w.GroupSize = intp(int(g))
			}
			if sym, ok := qc["sym"].(bool); ok {
				w.Symmetric = sym
			}
			s.groups = []group{{name: method, targets: []string{"Linear"}, weights: w}}
		}
		s.ignore = stringList(qc["modules_to_not_convert"])
	}
	s.recognized = len(s.groups) > 0
	slices.Sort(s.ignore)
	s.ignore = slices.Compact(s.ignore)
	return s
}

// matchModule reports whether a compressed-tensors style pattern names the
// module: "re:" regular expressions match from the start (Python's
// re.match), patterns with * are globs, and a plain name matches the module
// and everything under it.
func matchModule(pattern, module string) bool {
	switch {
	case strings.HasPrefix(pattern, "re:"):
		re, err := regexp.Compile("^(?:" + strings.TrimPrefix(pattern, "re:") + ")")
		return err == nil && re.MatchString(module)
	case strings.ContainsAny(pattern, "*?["):
		ok, _ := path.Match(pattern, module) // names hold no '/', so * spans dots
		return ok
	}
	return module == pattern || strings.HasPrefix(module, pattern+".")
}

// covers reports whether a group's targets cover a module of the given
// kind ("Linear" or "Embedding").
func (g group) covers(module, kind string) bool {
	for _, t := range g.targets {
		if t == kind || (t != "Linear" && t != "Embedding" && matchModule(t, module)) {
			return true
		}
	}
	return false
}
