package analyze

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// MaxTensorIndexSize bounds a source tensor index file.
const MaxTensorIndexSize = 64 << 20

// TensorIndex is the campaign's description of its source model's tensors,
// without their data. Its JSON form is
//
//	{"tensors": {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [151936, 4096]}, ...}}
type TensorIndex struct {
	Tensors map[string]SourceTensor `json:"tensors"`
}

// SourceTensor is one tensor of the source model.
type SourceTensor struct {
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// NumElements returns the product of the shape.
func (t SourceTensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// ParseTensorIndex decodes and validates a tensor index: known dtypes,
// non-negative dimensions whose product fits in 63 bits.
func ParseTensorIndex(data []byte) (*TensorIndex, error) {
	if len(data) > MaxTensorIndexSize {
		return nil, fail(reason.SourceInvalid, nil, "tensor index is %d bytes, over the limit of %d", len(data), MaxTensorIndexSize)
	}
	var x TensorIndex
	if err := json.Unmarshal(data, &x); err != nil {
		return nil, fail(reason.SourceInvalid, err, "tensor index is not valid JSON")
	}
	if len(x.Tensors) == 0 {
		return nil, fail(reason.SourceInvalid, nil, "tensor index lists no tensors")
	}
	if err := x.validate(); err != nil {
		return nil, err
	}
	return &x, nil
}

func (x *TensorIndex) validate() error {
	for name, t := range x.Tensors {
		if !safetensors.DType(t.DType).Known() {
			return fail(reason.SourceInvalid, nil, "tensor %q has unknown dtype %q", name, t.DType)
		}
		n := int64(1)
		for _, d := range t.Shape {
			if d < 0 || (d > 0 && n > (1<<62)/d) {
				return fail(reason.SourceInvalid, nil, "tensor %q has an invalid shape %v", name, t.Shape)
			}
			n *= d
		}
	}
	return nil
}

// TensorIndexOf describes a checkpoint's tensors as a source model index,
// for a campaign whose reference checkpoint is at hand.
func TensorIndexOf(c *safetensors.Checkpoint) *TensorIndex {
	x := &TensorIndex{Tensors: map[string]SourceTensor{}}
	for _, t := range c.Tensors() {
		x.Tensors[t.Name] = SourceTensor{DType: string(t.DType), Shape: slices.Clone(t.Shape)}
	}
	return x
}

// Names returns the tensor names, sorted.
func (x *TensorIndex) Names() []string {
	out := make([]string, 0, len(x.Tensors))
	for n := range x.Tensors {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (t SourceTensor) String() string { return fmt.Sprintf("%s%v", t.DType, t.Shape) }
