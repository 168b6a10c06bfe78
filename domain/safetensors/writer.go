package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Tensor is one tensor to write. Data holds its little-endian bytes; nil
// means all zeros, which WriteFile leaves as a hole of a sparse file.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Writer builds a safetensors file. Its layout follows the reference
// writer: tensors ordered by descending element width, then by name, laid
// end to end from offset 0, and the header padded with spaces to a multiple
// of 8 bytes. The zero Writer is ready to use; it is not safe for concurrent
// use.
type Writer struct {
	// Metadata is written as __metadata__ when not nil.
	Metadata map[string]string

	tensors []Tensor
	names   map[string]bool
}

// Add appends a tensor. It refuses an unknown dtype, a duplicate or empty
// name, a shape whose size overflows, and data whose length does not match
// the shape.
func (w *Writer) Add(t Tensor) error {
	if t.Name == "" || t.Name == MetadataKey {
		return newErr(reason.TensorInvalid, t.Name, "not a tensor name")
	}
	if w.names[t.Name] {
		return newErr(reason.TensorDuplicate, t.Name, "added twice")
	}
	if !t.DType.Known() {
		return newErr(reason.DTypeUnknown, t.Name, "dtype %q", t.DType)
	}
	n, ok := byteSize(t.DType, t.Shape)
	if !ok {
		return newErr(reason.TensorSizeMismatch, t.Name, "shape %v of %s overflows or does not fill whole bytes", t.Shape, t.DType)
	}
	if t.Data != nil && int64(len(t.Data)) != n {
		return newErr(reason.TensorSizeMismatch, t.Name, "%d bytes of data for a %d-byte tensor", len(t.Data), n)
	}
	if w.names == nil {
		w.names = map[string]bool{}
	}
	w.names[t.Name] = true
	t.Shape = slices.Clone(t.Shape)
	w.tensors = append(w.tensors, t)
	return nil
}

// MustAdd is Add for tests and generators with fixed inputs: it panics on
// error.
func (w *Writer) MustAdd(name string, dtype DType, shape []int64, data []byte) {
	if err := w.Add(Tensor{Name: name, DType: dtype, Shape: shape, Data: data}); err != nil {
		panic(err)
	}
}

type placed struct {
	Tensor
	begin, end int64
}

func (w *Writer) layout() []placed {
	ts := slices.Clone(w.tensors)
	slices.SortStableFunc(ts, func(a, b Tensor) int {
		if a.DType.Bits() != b.DType.Bits() {
			return cmpInt(b.DType.Bits(), a.DType.Bits())
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	out := make([]placed, len(ts))
	var off int64
	for i, t := range ts {
		n, _ := byteSize(t.DType, t.Shape)
		out[i] = placed{Tensor: t, begin: off, end: off + n}
		off += n
	}
	return out
}

// Header returns the file's first bytes (the 8-byte length prefix and the
// padded JSON header) and the length of the data section that follows.
func (w *Writer) Header() (prefix []byte, dataLen int64, err error) {
	ps := w.layout()
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	comma := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	if w.Metadata != nil {
		comma()
		md, err := json.Marshal(w.Metadata) // keys sorted
		if err != nil {
			return nil, 0, fmt.Errorf("encoding metadata: %w", err)
		}
		b.WriteString(`"` + MetadataKey + `":`)
		b.Write(md)
	}
	for _, p := range ps {
		comma()
		name, err := json.Marshal(p.Name)
		if err != nil {
			return nil, 0, fmt.Errorf("encoding tensor name: %w", err)
		}
		b.Write(name)
		b.WriteString(`:{"dtype":"` + string(p.DType) + `","shape":[`)
		for i, d := range p.Shape {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteString(`],"data_offsets":[` + strconv.FormatInt(p.begin, 10) + "," + strconv.FormatInt(p.end, 10) + "]}")
		dataLen = p.end
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	prefix = make([]byte, 8, 8+b.Len())
	binary.LittleEndian.PutUint64(prefix, uint64(b.Len()))
	return append(prefix, b.Bytes()...), dataLen, nil
}

// WriteTo writes the whole file to out, zeros included. It implements
// io.WriterTo.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	prefix, _, err := w.Header()
	if err != nil {
		return 0, err
	}
	n, err := out.Write(prefix)
	total := int64(n)
	if err != nil {
		return total, fmt.Errorf("writing header: %w", err)
	}
	for _, p := range w.layout() {
		var m int64
		if p.Data != nil {
			k, err := out.Write(p.Data)
			m = int64(k)
			if err != nil {
				return total + m, fmt.Errorf("writing tensor %q: %w", p.Name, err)
			}
		} else {
			m, err = io.CopyN(out, zeroReader{}, p.end-p.begin)
			if err != nil {
				return total + m, fmt.Errorf("writing tensor %q: %w", p.Name, err)
			}
		}
		total += m
	}
	return total, nil
}

// WriteFile writes the file at path and returns its size. Tensors without
// Data are not written: the file is extended with Truncate, so on file
// systems with sparse files they take no disk space and a 60 GB checkpoint
// layout costs only its headers.
func (w *Writer) WriteFile(path string) (size int64, err error) {
	prefix, dataLen, err := w.Header()
	if err != nil {
		return 0, err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, fmt.Errorf("creating %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing %s: %w", path, cerr)
		}
	}()
	if _, err := f.Write(prefix); err != nil {
		return 0, fmt.Errorf("writing %s: %w", path, err)
	}
	base := int64(len(prefix))
	for _, p := range w.layout() {
		if p.Data == nil {
			continue
		}
		if _, err := f.WriteAt(p.Data, base+p.begin); err != nil {
			return 0, fmt.Errorf("writing tensor %q to %s: %w", p.Name, path, err)
		}
	}
	size = base + dataLen
	if err := f.Truncate(size); err != nil {
		return 0, fmt.Errorf("sizing %s: %w", path, err)
	}
	return size, nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

var _ io.WriterTo = (*Writer)(nil)
