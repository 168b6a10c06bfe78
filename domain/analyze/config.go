package analyze

import (
	"bytes"
	"encoding/json"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
)

// MaxConfigSize bounds a config.json (a real one is a few kilobytes; a
// quantization ignore list can make it a few hundred).
const MaxConfigSize = 8 << 20

func parseConfig(data []byte) (map[string]any, error) {
	if len(data) > MaxConfigSize {
		return nil, fail(reason.ConfigInvalid, nil, "config.json is %d bytes, over the limit of %d", len(data), MaxConfigSize)
	}
	var cfg map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&cfg); err != nil || cfg == nil {
		return nil, fail(reason.ConfigInvalid, err, "config.json is not a JSON object")
	}
	if dec.More() {
		return nil, fail(reason.ConfigInvalid, nil, "config.json holds data after its object")
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
	// fam is the tool family whose config it is; nil when none claimed it.
	fam *family
	// recognized is true when a weight scheme was understood.
	recognized bool
	groups     []group
	ignore     []string
	// match is the family's reading of an ignore pattern; matchModule
	// when nil.
	match func(rx patterns, pattern, module string) bool
	// rx holds the config's regular expressions, each compiled once.
	rx     patterns
	kvBits *int
	sparse bool
	// layouts, when not nil, are the only layouts of the family's stores
	// this checkpoint may use (AutoAWQ's version: gemm or gemv).
	layouts []string
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

func fpArgs(bits int, strategy string, groupSize *int, dynamic bool) *record.QuantArgs {
	return &record.QuantArgs{NumBits: bits, Type: strp("float"), Strategy: strp(strategy), GroupSize: groupSize,
		Symmetric: true, Dynamic: dynamic, ObserverKwargs: map[string]any{}}
}

func intArgs(bits int, strategy string, groupSize *int) *record.QuantArgs {
	return &record.QuantArgs{NumBits: bits, Type: strp("int"), Strategy: strp(strategy), GroupSize: groupSize,
		Symmetric: true, ObserverKwargs: map[string]any{}}
}

// linearGroup is the one group of a tool that quantizes every Linear it
// does not skip (ModelOpt, transformers' fp8, GPTQ, AWQ, MXFP4,
// bitsandbytes).
func linearGroup(name string, w record.QuantArgs, a *record.QuantArgs) []group {
	return []group{{name: name, targets: []string{"Linear"}, weights: w, acts: a}}
}

// quantizationConfig returns the checkpoint's quantization config:
// config.json's quantization_config (or its text_config's), else the
// content of ModelOpt's hf_quant_config.json when the checkpoint has one,
// as vLLM reads them. nil when there is none.
func quantizationConfig(cfg, hfQuant map[string]any) map[string]any {
	if qc, ok := cfg["quantization_config"].(map[string]any); ok {
		return qc
	}
	if qc, ok := textConfig(cfg)["quantization_config"].(map[string]any); ok {
		return qc
	}
	return hfQuant
}

// schemeOf reads a quantization config with the first family that claims
// it. A config no family claims is an unrecognised scheme, which leaves
// the reading to the tensors.
func schemeOf(qc map[string]any) scheme {
	var s scheme
	for _, f := range families {
		if qc != nil && f.claims(qc) {
			s = f.parse(qc)
			s.fam = f
			break
		}
	}
	s.recognized = len(s.groups) > 0
	s.rx = patterns{}
	slices.Sort(s.ignore)
	s.ignore = slices.Compact(s.ignore)
	return s
}

// ignored reports whether the config's ignore list names a module, as its
// family reads the list.
func (s scheme) ignored(module string) bool {
	match := s.match
	if match == nil {
		match = matchModule
	}
	for _, p := range s.ignore {
		if match(s.rx, p, module) {
			return true
		}
	}
	return false
}

// groupOf returns the group that quantizes a linear module: the first
// group (by name) whose targets cover it, unless the ignore list names
// it; nil when none does.
func (s scheme) groupOf(module string) *group {
	if s.ignored(module) {
		return nil
	}
	for i := range s.groups {
		if s.groups[i].covers(s.rx, module, "Linear") {
			return &s.groups[i]
		}
	}
	return nil
}

// method returns a config's quant_method, lower case.
func method(qc map[string]any) string {
	m, _ := qc["quant_method"].(string)
	return strings.ToLower(m)
}

// number returns a config's number field, and whether it is one.
func number(qc map[string]any, key string) (int, bool) {
	f, ok := qc[key].(float64)
	return int(f), ok
}

// patterns compiles each regular expression of a config once per
// analysis (a config names a few; the analysis matches them against every
// linear). An expression that does not compile matches nothing. It is not
// shared between analyses, so an untrusted config cannot grow it beyond its
// own size.
type patterns map[string]*regexp.Regexp

// match reports whether expr matches s from its start, as Python's
// re.match does.
func (p patterns) match(expr, s string) bool {
	re, ok := p[expr]
	if !ok {
		re, _ = regexp.Compile("^(?:" + expr + ")")
		p[expr] = re
	}
	return re != nil && re.MatchString(s)
}

// matchModule reports whether a compressed-tensors style pattern names the
// module: "re:" regular expressions match from the start (Python's
// re.match), patterns with * are globs, and a plain name matches the module
// and everything under it.
func matchModule(rx patterns, pattern, module string) bool {
	switch {
	case strings.HasPrefix(pattern, "re:"):
		return rx.match(strings.TrimPrefix(pattern, "re:"), module)
	case strings.ContainsAny(pattern, "*?["):
		ok, _ := path.Match(pattern, module) // names hold no '/', so * spans dots
		return ok
	}
	return module == pattern || strings.HasPrefix(module, pattern+".")
}

// covers reports whether a group's targets cover a module of the given
// kind ("Linear" or "Embedding").
func (g group) covers(rx patterns, module, kind string) bool {
	for _, t := range g.targets {
		if t == kind || (t != "Linear" && t != "Embedding" && matchModule(rx, t, module)) {
			return true
		}
	}
	return false
}

// matchTransformers reads a pattern as transformers' should_convert_module
// does (modules_to_not_convert, llm_int8_skip_modules): a regular
// expression matched from the start of the module's name, or a suffix of
// it ("fc1" names model.decoder.layers.23.fc1).
func matchTransformers(rx patterns, pattern, module string) bool {
	return strings.HasSuffix(module, pattern) || rx.match(pattern, module)
}
