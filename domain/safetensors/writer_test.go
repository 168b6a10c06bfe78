package safetensors_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

func TestWriterRoundTrip(t *testing.T) {
	t.Parallel()
	w := &safetensors.Writer{Metadata: map[string]string{"format": "pt"}}
	w.MustAdd("b.weight", safetensors.BF16, []int64{2, 3}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	w.MustAdd("a.weight_packed", safetensors.I32, []int64{2, 1}, nil)
	w.MustAdd("a.weight_scale", safetensors.F8E4M3, []int64{3}, []byte{7, 8, 9})
	w.MustAdd("c.scalar", safetensors.F32, []int64{}, nil)

	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)

	path := filepath.Join(t.TempDir(), "m.safetensors")
	size, err := w.WriteFile(path)
	require.NoError(t, err)
	onDisk, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, buf.Bytes(), onDisk, "sparse and dense writes give the same bytes")
	require.Equal(t, int64(len(onDisk)), size)

	h, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	require.Empty(t, h.Gaps)
	require.Zero(t, h.GapBytes())
	require.Equal(t, map[string]string{"format": "pt"}, h.Metadata)
	require.Zero(t, (8+h.HeaderLen)%8, "data section is 8-byte aligned")
	// Widest dtypes first, then names.
	var names []string
	for _, ti := range h.Tensors {
		names = append(names, ti.Name)
	}
	require.Equal(t, []string{"a.weight_packed", "c.scalar", "b.weight", "a.weight_scale"}, names)

	b, ok := h.Tensor("b.weight")
	require.True(t, ok)
	require.Equal(t, safetensors.BF16, b.DType)
	require.Equal(t, []int64{2, 3}, b.Shape)
	require.Equal(t, int64(6), b.NumElements())
	data := onDisk[8+h.HeaderLen+b.Begin : 8+h.HeaderLen+b.End]
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, data)
	_, ok = h.Tensor("missing")
	require.False(t, ok)
}

func TestWriterRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		add  []safetensors.Tensor
		code safetensors.Code
	}{
		{"unknown dtype", []safetensors.Tensor{{Name: "a", DType: "Q8", Shape: []int64{1}}}, reason.DTypeUnknown},
		{"duplicate", []safetensors.Tensor{{Name: "a", DType: safetensors.U8, Shape: []int64{1}}, {Name: "a", DType: safetensors.U8, Shape: []int64{1}}}, reason.TensorDuplicate},
		{"empty name", []safetensors.Tensor{{Name: "", DType: safetensors.U8}}, reason.TensorInvalid},
		{"metadata key", []safetensors.Tensor{{Name: safetensors.MetadataKey, DType: safetensors.U8}}, reason.TensorInvalid},
		{"data length", []safetensors.Tensor{{Name: "a", DType: safetensors.BF16, Shape: []int64{2}, Data: []byte{1}}}, reason.TensorSizeMismatch},
		{"half byte", []safetensors.Tensor{{Name: "a", DType: safetensors.F4, Shape: []int64{3}}}, reason.TensorSizeMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var w safetensors.Writer
			var err error
			for _, ts := range tt.add {
				if err = w.Add(ts); err != nil {
					break
				}
			}
			require.Equal(t, tt.code, safetensors.CodeOf(err), "%v", err)
		})
	}
}

func TestWriterNamesNeedEscaping(t *testing.T) {
	t.Parallel()
	var w safetensors.Writer
	w.MustAdd("we\"ird\\name\n", safetensors.U8, []int64{1}, []byte{1})
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	h, err := read(t, buf.Bytes())
	require.NoError(t, err)
	_, ok := h.Tensor("we\"ird\\name\n")
	require.True(t, ok)
}
