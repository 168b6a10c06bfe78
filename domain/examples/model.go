package examples

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// The tiny Qwen3 architecture of the examples.
const (
	vocabSize    = 2048
	hiddenSize   = 256
	interSize    = 768
	numLayers    = 2
	numHeads     = 4
	numKVHeads   = 2
	headDim      = 64
	maxPositions = 4096
	ropeTheta    = 1000000
)

// Seeds of the generators: weights, synthetic calibration activations and
// the foreign adapter.
const (
	weightSeed  = 0x5157454e33 // "QWEN3"
	calibSeed   = 0x43414c4942 // "CALIB"
	adapterSeed = 0x4c4f5241   // "LORA"
	initStd     = 0.02
)

// srcTensor is one BF16 tensor of the source model.
type srcTensor struct {
	name  string
	shape []int64
	// vals are the BF16 values, widened exactly to float32.
	vals []float32
	// data are the little-endian BF16 bytes.
	data []byte
}

// linear reports whether the tensor is a linear weight the examples
// quantize: a rank-2 *.weight that is neither the embedding nor lm_head.
func (t *srcTensor) linear() bool {
	return len(t.shape) == 2 && strings.HasSuffix(t.name, ".weight") &&
		!strings.Contains(t.name, "embed") && t.name != "lm_head.weight"
}

// model is the source model: its tensors sorted by name.
type model struct {
	tensors []*srcTensor
}

// rngFor returns a generator whose stream depends only on the seed and the
// name, so every tensor's values are independent of the others.
func rngFor(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// bf16Tensor makes a BF16 tensor from float32 values, rounding each to
// BF16.
func bf16Tensor(name string, shape []int64, vals []float32) *srcTensor {
	t := &srcTensor{name: name, shape: shape, vals: make([]float32, len(vals)), data: make([]byte, 2*len(vals))}
	for i, v := range vals {
		h := bf16FromFloat32(v)
		t.vals[i] = bf16ToFloat32(h)
		binary.LittleEndian.PutUint16(t.data[2*i:], h)
	}
	return t
}

// normalTensor draws a BF16 tensor of N(0, std²) values.
func normalTensor(seed uint64, name string, std float64, shape ...int64) *srcTensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	r := rngFor(seed, name)
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(r.NormFloat64() * std)
	}
	return bf16Tensor(name, shape, vals)
}

// onesTensor is a norm weight: all 1.0.
func onesTensor(name string, n int64) *srcTensor {
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = 1
	}
	return bf16Tensor(name, []int64{n}, vals)
}

// newModel generates the source model's weights.
func newModel() *model {
	m := &model{}
	add := func(t *srcTensor) { m.tensors = append(m.tensors, t) }
	add(normalTensor(weightSeed, "model.embed_tokens.weight", initStd, vocabSize, hiddenSize))
	add(onesTensor("model.norm.weight", hiddenSize))
	add(normalTensor(weightSeed, "lm_head.weight", initStd, vocabSize, hiddenSize))
	for l := range numLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(onesTensor(p+"input_layernorm.weight", hiddenSize))
		add(onesTensor(p+"post_attention_layernorm.weight", hiddenSize))
		add(normalTensor(weightSeed, p+"self_attn.q_proj.weight", initStd, numHeads*headDim, hiddenSize))
		add(normalTensor(weightSeed, p+"self_attn.k_proj.weight", initStd, numKVHeads*headDim, hiddenSize))
		add(normalTensor(weightSeed, p+"self_attn.v_proj.weight", initStd, numKVHeads*headDim, hiddenSize))
		add(normalTensor(weightSeed, p+"self_attn.o_proj.weight", initStd, hiddenSize, numHeads*headDim))
		add(onesTensor(p+"self_attn.q_norm.weight", headDim))
		add(onesTensor(p+"self_attn.k_norm.weight", headDim))
		add(normalTensor(weightSeed, p+"mlp.gate_proj.weight", initStd, interSize, hiddenSize))
		add(normalTensor(weightSeed, p+"mlp.up_proj.weight", initStd, interSize, hiddenSize))
		add(normalTensor(weightSeed, p+"mlp.down_proj.weight", initStd, hiddenSize, interSize))
	}
	slices.SortFunc(m.tensors, func(a, b *srcTensor) int { return strings.Compare(a.name, b.name) })
	return m
}

// form is how the linear weights of a checkpoint are stored.
type form int

const (
	formBF16  form = iota // unquantized
	formFP8               // FP8 E4M3 per output channel, F32 scales
	formInt4              // int4 symmetric, group 32, BF16 scales, packed in I32
	formNVFP4             // FP4 E2M1, FP8 scale per 16, F32 global scale
)

// checkpoint returns the model's tensors with the linear weights stored in
// the given form; everything else stays BF16.
func (m *model) checkpoint(f form) []safetensors.Tensor {
	var out []safetensors.Tensor
	for _, t := range m.tensors {
		if f == formBF16 || !t.linear() {
			out = append(out, safetensors.Tensor{Name: t.name, DType: safetensors.BF16, Shape: t.shape, Data: t.data})
			continue
		}
		mod := strings.TrimSuffix(t.name, ".weight")
		rows, cols := int(t.shape[0]), int(t.shape[1])
		switch f {
		case formFP8:
			w, s := quantFP8(t.vals, rows, cols)
			out = append(out,
				safetensors.Tensor{Name: mod + ".weight", DType: safetensors.F8E4M3, Shape: t.shape, Data: w},
				safetensors.Tensor{Name: mod + ".weight_scale", DType: safetensors.F32, Shape: []int64{t.shape[0], 1}, Data: s})
		case formInt4:
			w, s := quantInt4(t.vals, rows, cols)
			out = append(out,
				safetensors.Tensor{Name: mod + ".weight_packed", DType: safetensors.I32, Shape: []int64{t.shape[0], t.shape[1] / 8}, Data: w},
				safetensors.Tensor{Name: mod + ".weight_scale", DType: safetensors.BF16, Shape: []int64{t.shape[0], t.shape[1] / int4Group}, Data: s},
				safetensors.Tensor{Name: mod + ".weight_shape", DType: safetensors.I64, Shape: []int64{2}, Data: i64Bytes(t.shape...)})
		case formNVFP4:
			w, s, gs := quantNVFP4(t.vals, rows, cols)
			out = append(out,
				safetensors.Tensor{Name: mod + ".weight_packed", DType: safetensors.U8, Shape: []int64{t.shape[0], t.shape[1] / 2}, Data: w},
				safetensors.Tensor{Name: mod + ".weight_scale", DType: safetensors.F8E4M3, Shape: []int64{t.shape[0], t.shape[1] / nvfp4Group}, Data: s},
				safetensors.Tensor{Name: mod + ".weight_global_scale", DType: safetensors.F32, Shape: []int64{1}, Data: f32Bytes(gs)},
				safetensors.Tensor{Name: mod + ".input_global_scale", DType: safetensors.F32, Shape: []int64{1}, Data: f32Bytes(inputGlobalScale(mod, cols))})
		}
	}
	return out
}

func f32Bytes(vs ...float32) []byte {
	out := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

func i64Bytes(vs ...int64) []byte {
	out := make([]byte, 8*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint64(out[8*i:], uint64(v))
	}
	return out
}

func absMax(vs []float32) float64 {
	var m float64
	for _, v := range vs {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// quantFP8 quantizes a [rows, cols] weight to FP8 E4M3 per output channel:
// scale = absmax/448 in F32, code = e4m3(w / scale). It returns the codes
// and the F32 scales ([rows, 1]).
func quantFP8(w []float32, rows, cols int) (codes, scales []byte) {
	codes = make([]byte, rows*cols)
	sc := make([]float32, rows)
	for r := range rows {
		row := w[r*cols : (r+1)*cols]
		s := float32(absMax(row) / fp8Max)
		if s == 0 {
			s = 1
		}
		sc[r] = s
		for c, v := range row {
			codes[r*cols+c] = fp8FromFloat(float64(v) / float64(s))
		}
	}
	return codes, f32Bytes(sc...)
}

// int4Group is the group size of the int4 example.
const int4Group = 32

// quantInt4 quantizes a [rows, cols] weight to symmetric int4 in groups of
// 32 along the input: scale = absmax/7 rounded to BF16, q = clamp(round(w /
// scale), -8, 7). It returns the compressed-tensors packing (q+8 as
// unsigned nibbles, eight to a little-endian int32, the first in the lowest
// bits; [rows, cols/8]) and the BF16 scales ([rows, cols/32]).
func quantInt4(w []float32, rows, cols int) (packed, scales []byte) {
	packed = make([]byte, rows*cols/2)
	scales = make([]byte, 2*rows*cols/int4Group)
	q := make([]int, cols)
	for r := range rows {
		row := w[r*cols : (r+1)*cols]
		for g := range cols / int4Group {
			grp := row[g*int4Group : (g+1)*int4Group]
			h := bf16FromFloat32(float32(absMax(grp) / 7))
			s := float64(bf16ToFloat32(h))
			if s == 0 {
				h, s = bf16FromFloat32(1), 1
			}
			binary.LittleEndian.PutUint16(scales[2*(r*cols/int4Group+g):], h)
			for i, v := range grp {
				q[g*int4Group+i] = min(7, max(-8, int(math.RoundToEven(float64(v)/s))))
			}
		}
		for j := range cols / 8 {
			var word uint32
			for i := range 8 {
				word |= uint32(q[8*j+i]+8) & 0xF << (4 * i)
			}
			binary.LittleEndian.PutUint32(packed[4*(r*cols/8+j):], word)
		}
	}
	return packed, scales
}

// nvfp4Group is the group size of NVFP4.
const nvfp4Group = 16

// quantNVFP4 quantizes a [rows, cols] weight to NVFP4 as compressed-tensors
// stores it: a global scale gs = 448·6/absmax(w) in F32; per group of 16 an
// FP8 E4M3 scale e4m3(absmax(group)/6 · gs); and FP4 E2M1 codes of w /
// (scale/gs), two to a byte, the first in the low nibble. It returns the
// packed codes ([rows, cols/2]), the FP8 scales ([rows, cols/16]) and gs.
func quantNVFP4(w []float32, rows, cols int) (packed, scales []byte, gs float32) {
	amax := absMax(w)
	gs = 1
	if amax > 0 {
		gs = float32(fp8Max * fp4Max / amax)
	}
	packed = make([]byte, rows*cols/2)
	scales = make([]byte, rows*cols/nvfp4Group)
	codes := make([]uint8, cols)
	for r := range rows {
		row := w[r*cols : (r+1)*cols]
		for g := range cols / nvfp4Group {
			grp := row[g*nvfp4Group : (g+1)*nvfp4Group]
			sc := fp8FromFloat(absMax(grp) / fp4Max * float64(gs))
			scales[r*cols/nvfp4Group+g] = sc
			s := fp8ToFloat(sc) / float64(gs)
			for i, v := range grp {
				if s == 0 {
					codes[g*nvfp4Group+i] = 0
					continue
				}
				codes[g*nvfp4Group+i] = fp4FromFloat(float64(v) / s)
			}
		}
		for j := range cols / 2 {
			packed[r*cols/2+j] = codes[2*j] | codes[2*j+1]<<4
		}
	}
	return packed, scales, gs
}

// inputGlobalScale is a module's NVFP4 input global scale, 448·6/absmax of
// a synthetic calibration batch of unit-variance activations (64 tokens of
// the module's input width), as a calibration run would store it.
func inputGlobalScale(module string, width int) float32 {
	r := rngFor(calibSeed, module)
	var amax float64
	for range 64 * width {
		amax = max(amax, math.Abs(r.NormFloat64()))
	}
	return float32(fp8Max * fp4Max / amax)
}

// adapter returns the foreign LoRA tensors of the foreign-tensors example:
// a rank-16 adapter on layer 0's MLP, in BF16.
func adapter() []safetensors.Tensor {
	const rank = 16
	var out []safetensors.Tensor
	for _, t := range []*srcTensor{
		normalTensor(adapterSeed, "model.layers.0.mlp.adapter.lora_A.weight", initStd, rank, hiddenSize),
		normalTensor(adapterSeed, "model.layers.0.mlp.adapter.lora_B.weight", initStd, interSize, rank),
	} {
		out = append(out, safetensors.Tensor{Name: t.name, DType: safetensors.BF16, Shape: t.shape, Data: t.data})
	}
	return out
}
