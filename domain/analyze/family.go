package analyze

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// A family is one quantization tool's checkpoint format: how its
// quantization_config reads, and the names and layouts of the tensors it
// writes beside, or instead of, a source weight. Each family lives in its
// own file (ct.go, modelopt.go, gptq.go, awq.go, fp8.go, mxfp4.go,
// bnb.go), written from the tool's own writer, which its golden test
// names.
type family struct {
	// name is the tool, as messages name it.
	name string
	// claims reports whether a quantization_config is this family's.
	claims func(qc map[string]any) bool
	// parse reads the family's quantization_config.
	parse func(qc map[string]any) scheme
	// same are layouts in which the tool stores a weight's values under
	// the weight's own name but not in its shape (ModelOpt's NVFP4 bytes,
	// bitsandbytes' flattened 4-bit storage).
	same []layout
	// stores are the other tensors that hold a weight's values instead of
	// the weight (weight_packed, qweight, gate_up_proj_blocks).
	stores []store
	// weight are the companions that hold the weight's scales, zero
	// points, group indices and shapes: they count in bits_per_weight.
	weight []suffix
	// acts are the companions of the activations (input scales): allowed
	// beside a source weight, not weight bytes.
	acts []suffix
}

// anchor says where a companion's suffix attaches.
type anchor int

const (
	// onModule: M.suffix, M the module of a source weight M.weight.
	onModule anchor = iota
	// onTensor: T.suffix, T the source weight (bitsandbytes'
	// q_proj.weight.absmax).
	onTensor
	// onParam: T + suffix, no dot (gpt-oss' experts.gate_up_proj_blocks).
	onParam
)

// suffix is a companion name relative to a source weight.
type suffix struct {
	at anchor
	s  string
}

func mod(s string) suffix   { return suffix{onModule, s} }
func ten(s string) suffix   { return suffix{onTensor, s} }
func param(s string) suffix { return suffix{onParam, s} }

// of returns the companion's name for a source weight, or "" when the
// suffix does not apply (an onModule suffix needs a weight named M.weight).
func (x suffix) of(tensor string) string {
	switch x.at {
	case onModule:
		if m, ok := strings.CutSuffix(tensor, ".weight"); ok {
			return m + "." + x.s
		}
		return ""
	case onTensor:
		return tensor + "." + x.s
	}
	return tensor + x.s
}

// store is a tensor that holds a source weight's values instead of the
// weight, with the layouts its writers give it.
type store struct {
	at      suffix
	layouts []layout
}

// layout is one way a writer lays a weight's values out. fits returns the
// bit widths for which a stored tensor of dtype dt and shape got holds a
// source tensor of shape src; none when it does not.
type layout struct {
	name string
	fits func(src []int64, dt safetensors.DType, got []int64) []int
}

// families are every tool family the contract reads, in the order a
// quantization_config is offered to them: ModelOpt first, since its newer
// config.json layout also carries compressed-tensors' config_groups.
var families = []*family{
	modelOpt, compressedTensors, fineGrainedFP8, gptq, awq, mxfp4, bitsAndBytes,
}

// allSuffixes are every family's stores and companions, each once;
// weightSuffixes every family's weight companions, each once (ModelOpt and
// compressed-tensors both name a weight_scale).
var allSuffixes, weightSuffixes = func() ([]suffix, []suffix) {
	var all, weight []suffix
	for _, f := range families {
		for _, s := range f.stores {
			all = append(all, s.at)
		}
		all = append(all, f.weight...)
		all = append(all, f.acts...)
		weight = append(weight, f.weight...)
	}
	return uniqueSuffixes(all), uniqueSuffixes(weight)
}()

func uniqueSuffixes(l []suffix) []suffix {
	slices.SortFunc(l, func(x, y suffix) int {
		if x.at != y.at {
			return int(x.at) - int(y.at)
		}
		return strings.Compare(x.s, y.s)
	})
	return slices.Compact(l)
}

// plain is a weight stored under its own name in the source's shape: its
// dtype's width.
var plain = layout{name: "plain", fits: func(src []int64, dt safetensors.DType, got []int64) []int {
	if slices.Equal(src, got) && dt.Known() {
		return []int{int(dt.Bits())}
	}
	return nil
}}

// lastDimPacked holds values packed along the last dimension, the other
// dimensions equal: 4-bit values two per byte in U8 or I8, ceil(n/2)
// (ModelOpt's and compressed-tensors' NVFP4 and MXFP4), or b-bit values
// 32/b whole values per I32 or U32 word, ceil(n / (32/b))
// (compressed-tensors' pack_to_int32, b from 1 to 8).
var lastDimPacked = layout{name: "packed", fits: func(src []int64, dt safetensors.DType, got []int64) []int {
	r := len(src)
	if r == 0 || len(got) != r || !slices.Equal(src[:r-1], got[:r-1]) {
		return nil
	}
	n, last := src[r-1], got[r-1]
	var out []int
	switch dt {
	case safetensors.U8, safetensors.I8:
		if last == ceilDiv(n, 2) {
			out = append(out, 4)
		}
	case safetensors.I32, safetensors.U32:
		for b := int64(1); b <= 8; b++ {
			if last == ceilDiv(n, 32/b) {
				out = append(out, int(b))
			}
		}
	}
	return out
}}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// located is how the checkpoint holds one source tensor.
type located struct {
	// t is the tensor holding its values; nil when there is none.
	t *safetensors.Located
	// fits are the bit widths whose packing t's shape holds (its dtype's
	// width when t is the source tensor in the source's shape).
	fits []int
}

// locate finds the tensor that holds a source tensor's values: the tensor
// itself (in the source's shape, or packed as a family stores it under the
// same name), else a family's store (weight_packed, qweight, *_blocks).
// When the config's family owns the store, only that family's layouts (and
// the config's own, such as AutoAWQ's version) are accepted. It returns a
// description of the problem when the tensor is missing or holds no
// packing of the source's shape.
func (a *analysis) locate(name string, st SourceTensor) (located, string) {
	if t, ok := a.ck.Tensor(name); ok {
		if fits := plain.fits(st.Shape, t.DType, t.Shape); fits != nil {
			return located{t: &t, fits: fits}, ""
		}
		var fits []int
		for _, f := range families {
			for _, l := range f.same {
				fits = append(fits, l.fits(st.Shape, t.DType, t.Shape)...)
			}
		}
		l := located{t: &t, fits: compact(fits)}
		if len(l.fits) == 0 {
			return l, fmt.Sprintf("%s is %s%v, the source %s", name, t.DType, t.Shape, st)
		}
		return l, ""
	}
	for _, at := range storeNames() {
		sname := at.of(name)
		if sname == "" {
			continue
		}
		t, ok := a.ck.Tensor(sname)
		if !ok {
			continue
		}
		var bits []int
		var names []string
		for _, l := range a.storeLayouts(at) {
			bits = append(bits, l.fits(st.Shape, t.DType, t.Shape)...)
			names = append(names, l.name)
		}
		l := located{t: &t, fits: compact(bits)}
		if len(l.fits) == 0 {
			return l, fmt.Sprintf("%s is %s%v, in no %s layout of the source %s %s", sname, t.DType, t.Shape, strings.Join(names, " or "), name, st)
		}
		return l, ""
	}
	return located{}, name + " is missing"
}

// storeNames are the stores of every family, each once, in the families'
// order.
func storeNames() []suffix {
	var out []suffix
	for _, f := range families {
		for _, s := range f.stores {
			if !slices.Contains(out, s.at) {
				out = append(out, s.at)
			}
		}
	}
	return out
}

// storeLayouts are the layouts a store may have in this checkpoint: the
// config's family's own (narrowed to the config's, such as AutoAWQ's
// version) when that family writes this store, else every family's.
func (a *analysis) storeLayouts(at suffix) []layout {
	if f := a.sch.fam; f != nil {
		for _, s := range f.stores {
			if s.at != at {
				continue
			}
			if a.sch.layouts == nil {
				return s.layouts
			}
			var out []layout
			for _, l := range s.layouts {
				if slices.Contains(a.sch.layouts, l.name) {
					out = append(out, l)
				}
			}
			return out
		}
	}
	var out []layout
	for _, f := range families {
		for _, s := range f.stores {
			if s.at == at {
				out = append(out, s.layouts...)
			}
		}
	}
	return out
}

func compact(bits []int) []int {
	slices.Sort(bits)
	return slices.Compact(bits)
}
