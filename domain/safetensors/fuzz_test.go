package safetensors_test

import (
	"bytes"
	"testing"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// FuzzReadHeader feeds arbitrary files to ReadHeader. It must never panic,
// must refuse with a code, and what it accepts must be self-consistent: the
// tensors tile part of the data section without overlap and, with the gaps,
// account for every byte of it. The seed corpus is in
// testdata/fuzz/FuzzReadHeader.
func FuzzReadHeader(f *testing.F) {
	f.Add(raw(`{"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}`, 8))
	f.Add(raw(`{"__metadata__":{"format":"pt"},"w":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}}`, 2))
	f.Add(raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if safetensors.CodeOf(err) == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		if h.BytesRead > int64(len(data)) || h.BytesRead != 8+h.HeaderLen {
			t.Fatalf("read %d bytes of a %d-byte file", h.BytesRead, len(data))
		}
		covered := h.GapBytes()
		var end int64
		for _, ti := range h.Tensors {
			if ti.Begin < end && ti.Bytes() > 0 {
				t.Fatalf("tensor %q overlaps", ti.Name)
			}
			if ti.End > h.DataLen() {
				t.Fatalf("tensor %q past the end", ti.Name)
			}
			if ti.Bytes() > 0 {
				end = ti.End
			}
			covered += ti.Bytes()
			if got, ok := h.Tensor(ti.Name); !ok || got.Name != ti.Name {
				t.Fatalf("lookup of %q failed", ti.Name)
			}
		}
		if covered != h.DataLen() {
			t.Fatalf("tensors and gaps cover %d of %d bytes", covered, h.DataLen())
		}
	})
}
