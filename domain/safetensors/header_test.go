package safetensors_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// raw returns a file of the given JSON header followed by dataLen zero
// bytes.
func raw(header string, dataLen int) []byte {
	b := make([]byte, 8, 8+len(header)+dataLen)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataLen)...)
}

func read(t *testing.T, data []byte) (*safetensors.Header, error) {
	t.Helper()
	return safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)))
}

func TestReadHeaderAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		file     []byte
		tensors  int
		gaps     []safetensors.Gap
		metadata map[string]string
	}{
		{name: "empty object", file: raw(`{}`, 0)},
		{name: "padded with spaces", file: raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}   `, 8), tensors: 1},
		{name: "metadata", file: raw(`{"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}`, 3), tensors: 1, metadata: map[string]string{"format": "pt"}},
		{name: "scalar", file: raw(`{"a":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}`, 8), tensors: 1},
		{name: "empty tensor", file: raw(`{"a":{"dtype":"BF16","shape":[0,4],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), tensors: 2},
		{name: "F4 packs two per byte", file: raw(`{"a":{"dtype":"F4","shape":[4,2],"data_offsets":[0,4]}}`, 4), tensors: 1},
		{name: "F6 packs four in three bytes", file: raw(`{"a":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}}`, 3), tensors: 1},
		{name: "order in header need not be offset order", file: raw(`{"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 4), tensors: 2},
		{name: "gap between tensors", file: raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}}`, 8), tensors: 2, gaps: []safetensors.Gap{{Begin: 2, End: 6}}},
		{name: "trailing bytes", file: raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 5), tensors: 1, gaps: []safetensors.Gap{{Begin: 2, End: 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := read(t, tt.file)
			require.NoError(t, err)
			require.Len(t, h.Tensors, tt.tensors)
			require.Equal(t, tt.gaps, h.Gaps)
			require.Equal(t, tt.metadata, h.Metadata)
			require.Equal(t, int64(len(tt.file)), h.FileSize)
			require.Equal(t, 8+h.HeaderLen, h.BytesRead)
		})
	}
}

func TestReadHeaderRefuses(t *testing.T) {
	t.Parallel()
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, safetensors.MaxHeaderSize+1)
	maxU64 := make([]byte, 16)
	binary.LittleEndian.PutUint64(maxU64, ^uint64(0))
	longer := raw(`{}`, 0)
	binary.LittleEndian.PutUint64(longer, 3)

	tensor := func(body string) string { return `{"w":` + body + `}` }
	tests := []struct {
		name string
		file []byte
		code safetensors.Code
	}{
		{"empty file", nil, reason.HeaderTruncated},
		{"shorter than the prefix", []byte{1, 0, 0}, reason.HeaderTruncated},
		{"header length larger than the file", longer, reason.HeaderTruncated},
		{"header length over the limit", huge, reason.HeaderTooLarge},
		{"header length 2^64-1", maxU64, reason.HeaderTooLarge},
		{"not JSON", raw(`hello!!!`, 0), reason.HeaderInvalidJSON},
		{"JSON array", raw(`[]`, 0), reason.HeaderInvalidJSON},
		{"zero-length header", raw(``, 0), reason.HeaderInvalidJSON},
		{"unclosed object", raw(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}`, 1), reason.HeaderInvalidJSON},
		{"two objects", raw(`{}{}`, 0), reason.HeaderInvalidJSON},
		{"invalid UTF-8", raw("{\"\xff\":1}", 0), reason.HeaderInvalidJSON},
		{"NUL padding", raw("{}\x00\x00", 0), reason.HeaderInvalidJSON},
		{"metadata not strings", raw(`{"__metadata__":{"a":1}}`, 0), reason.MetadataInvalid},
		{"metadata duplicate key", raw(`{"__metadata__":{"a":"x","a":"y"}}`, 0), reason.MetadataInvalid},
		{"metadata twice", raw(`{"__metadata__":{},"__metadata__":{}}`, 0), reason.TensorDuplicate},
		{"duplicate tensor name", raw(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), reason.TensorDuplicate},
		{"entry not an object", raw(tensor(`1`), 0), reason.TensorInvalid},
		{"missing dtype", raw(tensor(`{"shape":[1],"data_offsets":[0,1]}`), 1), reason.TensorInvalid},
		{"missing shape", raw(tensor(`{"dtype":"U8","data_offsets":[0,1]}`), 1), reason.TensorInvalid},
		{"missing offsets", raw(tensor(`{"dtype":"U8","shape":[1]}`), 1), reason.TensorInvalid},
		{"extra key", raw(tensor(`{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}`), 1), reason.TensorInvalid},
		{"dtype twice", raw(tensor(`{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}`), 1), reason.TensorInvalid},
		{"negative dim", raw(tensor(`{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}`), 1), reason.TensorInvalid},
		{"float dim", raw(tensor(`{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}`), 1), reason.TensorInvalid},
		{"dim over int64", raw(tensor(`{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}`), 1), reason.TensorInvalid},
		{"rank over the limit", raw(tensor(`{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}`), 1), reason.TensorInvalid},
		{"three offsets", raw(tensor(`{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}`), 2), reason.TensorInvalid},
		{"empty name", raw(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), reason.TensorInvalid},
		{"unknown dtype", raw(tensor(`{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}`), 1), reason.DTypeUnknown},
		{"lower-case dtype", raw(tensor(`{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}`), 2), reason.DTypeUnknown},
		{"size mismatch", raw(tensor(`{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}`), 4), reason.TensorSizeMismatch},
		{"odd F4 count", raw(tensor(`{"dtype":"F4","shape":[3],"data_offsets":[0,2]}`), 2), reason.TensorSizeMismatch},
		{"shape overflows", raw(tensor(`{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}`), 8), reason.TensorSizeMismatch},
		{"reversed offsets", raw(tensor(`{"dtype":"U8","shape":[0],"data_offsets":[2,1]}`), 2), reason.TensorOffsetsOutOfRange},
		{"offsets past the end", raw(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 6), reason.TensorOffsetsOutOfRange},
		{"offsets far past the end", raw(tensor(`{"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]}`), 1), reason.TensorOffsetsOutOfRange},
		{"empty tensor past the end", raw(tensor(`{"dtype":"BF16","shape":[0,0],"data_offsets":[8,8]}`), 0), reason.TensorOffsetsOutOfRange},
		{"overlap", raw(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 6), reason.TensorOffsetsOverlap},
		{"same bytes twice", raw(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}}`, 4), reason.TensorOffsetsOverlap},
		{"file truncated", raw(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 7), reason.FileTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := read(t, tt.file)
			require.Nil(t, h)
			require.Error(t, err)
			require.Equal(t, tt.code, safetensors.CodeOf(err), "%v", err)
			require.ErrorIs(t, err, &safetensors.Error{Code: tt.code})
			require.NotEmpty(t, safetensors.Describe(tt.code))
		})
	}
}

func TestReadFileSetsFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	require.NoError(t, os.WriteFile(path, raw(`{"a":1}`, 0), 0o600))
	_, err := safetensors.ReadFile(path)
	var e *safetensors.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, path, e.File)
	require.Equal(t, reason.TensorInvalid, e.Code)

	_, err = safetensors.ReadFile(filepath.Join(t.TempDir(), "absent.safetensors"))
	require.Equal(t, reason.IOError, safetensors.CodeOf(err))
}

// failingReader fails every read, as a broken disk would.
type failingReader struct{}

func (failingReader) ReadAt([]byte, int64) (int, error) { return 0, errors.New("disk on fire") }

func TestReadHeaderIOError(t *testing.T) {
	t.Parallel()
	_, err := safetensors.ReadHeader(failingReader{}, 100)
	require.Equal(t, reason.IOError, safetensors.CodeOf(err))
	require.ErrorContains(t, err, "disk on fire")
}

func TestCodesDescribed(t *testing.T) {
	t.Parallel()
	for _, c := range safetensors.Codes() {
		require.NotEmpty(t, safetensors.Describe(c), c)
	}
	require.Empty(t, safetensors.Describe("nope"))
}

// countingReader counts what a stream handed out.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestReadHeaderStreamReadsOnlyTheHeader(t *testing.T) {
	t.Parallel()
	data := raw(`{"a":{"dtype":"F32","shape":[256],"data_offsets":[0,1024]}}`, 1024)
	cr := &countingReader{r: bytes.NewReader(data)}
	h, err := safetensors.ReadHeaderStream(cr, int64(len(data)))
	require.NoError(t, err)
	require.Equal(t, h.BytesRead, cr.n, "not a byte of tensor data")
	require.Less(t, cr.n, int64(len(data)))
	a, ok := h.Tensor("a")
	require.True(t, ok)
	require.Equal(t, int64(1024), a.Bytes())

	short := data[:20]
	_, err = safetensors.ReadHeaderStream(bytes.NewReader(short), int64(len(data)))
	require.Equal(t, reason.HeaderTruncated, safetensors.CodeOf(err), "a stream shorter than its announced size")
}
