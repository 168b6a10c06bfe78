// Package safetensors reads and writes safetensors files without touching
// their tensor data: a reader of the header alone (an 8-byte little-endian
// length, then that many bytes of JSON), bounded before it allocates, that
// refuses every malformed file with a stable reason code; a reader of
// sharded checkpoints through model.safetensors.index.json; and a writer of
// real files, sparse where the data is zero, for tests, benchmarks and the
// example bundles.
//
// Memory: reading a header allocates a small multiple of its declared
// length, which is bounded by MaxHeaderSize and by the file's size; the
// tensor data is never read.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/lowbarena/lowbarena/events/reason"
)

// MaxHeaderSize is the largest header length accepted, as in the reference
// implementation (which uses 100 MB). A 28-billion-parameter checkpoint has
// a few hundred kilobytes of header per shard.
const MaxHeaderSize = 100 << 20

// MaxRank is the largest number of dimensions accepted for one tensor. It
// bounds the allocation per shape entry.
const MaxRank = 16

// MetadataKey is the one header key that is not a tensor.
const MetadataKey = "__metadata__"

// TensorInfo is one tensor entry of a header. Begin and End are offsets in
// the data section (which starts 8+HeaderLen bytes into the file).
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	Begin int64
	End   int64
}

// NumElements returns the product of the shape (1 for a scalar). It does not
// overflow for a tensor of a header that ReadHeader accepted.
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Bytes returns the tensor's size in the data section.
func (t TensorInfo) Bytes() int64 { return t.End - t.Begin }

// Gap is a range of the data section that no tensor covers, in data-section
// offsets.
type Gap struct {
	Begin int64
	End   int64
}

// Header is a parsed and validated safetensors header.
type Header struct {
	// Tensors are ordered by Begin, then End, then Name.
	Tensors []TensorInfo
	// Metadata is the __metadata__ entry; nil when absent.
	Metadata map[string]string
	// HeaderLen is the declared JSON length N; the data section starts at
	// 8+N.
	HeaderLen int64
	// FileSize is the size of the whole file.
	FileSize int64
	// Gaps are the ranges of the data section that no tensor covers. The
	// reference writer leaves none; bytes there are unaccounted for.
	Gaps []Gap
	// BytesRead is how many bytes of the file were read: 8+N.
	BytesRead int64

	byName map[string]int
}

// DataLen returns the length of the data section.
func (h *Header) DataLen() int64 { return h.FileSize - 8 - h.HeaderLen }

// Tensor returns the named tensor entry.
func (h *Header) Tensor(name string) (TensorInfo, bool) {
	i, ok := h.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

// GapBytes returns the total length of the gaps.
func (h *Header) GapBytes() int64 {
	var n int64
	for _, g := range h.Gaps {
		n += g.End - g.Begin
	}
	return n
}

// ReadFile opens path and reads its header. Errors are *Error values whose
// File is path.
func ReadFile(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Code: reason.IOError, File: path, Err: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &Error{Code: reason.IOError, File: path, Err: err}
	}
	h, err := ReadHeader(f, st.Size())
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.File == "" {
			e.File = path
		}
		return nil, err
	}
	return h, nil
}

// ReadHeader reads and validates the header of a safetensors file of the
// given size through r. It reads only the first 8+N bytes, after checking
// that N is at most MaxHeaderSize and at most size-8. Every refusal is an
// *Error with a stable Code.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	if size < 8 {
		return nil, newErr(reason.HeaderTruncated, "", "file is %d bytes, shorter than the 8-byte length prefix", size)
	}
	var prefix [8]byte
	if _, err := r.ReadAt(prefix[:], 0); err != nil {
		return nil, readErr(err, "reading the length prefix")
	}
	n := binary.LittleEndian.Uint64(prefix[:])
	if n > MaxHeaderSize {
		return nil, newErr(reason.HeaderTooLarge, "", "header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, newErr(reason.HeaderTruncated, "", "header length %d exceeds the %d bytes that follow the prefix", n, size-8)
	}
	buf := make([]byte, n)
	// An io.ReaderAt may return io.EOF with a full buffer at the end of its
	// data; any error with fewer bytes is a short read.
	if m, err := r.ReadAt(buf, 8); err != nil && !(errors.Is(err, io.EOF) && m == len(buf)) {
		return nil, readErr(err, "reading the header")
	}
	h, err := parseHeader(buf, int64(n), size)
	if err != nil {
		return nil, err
	}
	h.BytesRead = 8 + int64(n)
	return h, nil
}

func readErr(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &Error{Code: reason.HeaderTruncated, Detail: what, Err: err}
	}
	return &Error{Code: reason.IOError, Detail: what, Err: err}
}

func invalidJSON(format string, args ...any) *Error {
	return newErr(reason.HeaderInvalidJSON, "", format, args...)
}

// parseHeader decodes the JSON header token by token, so that a duplicate
// name is seen (encoding/json would keep the last one silently), then
// validates every entry against the data section.
func parseHeader(buf []byte, n, size int64) (*Header, error) {
	if !utf8.Valid(buf) {
		return nil, invalidJSON("header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return nil, invalidJSON("header is not a JSON object: %v", err)
	}
	h := &Header{HeaderLen: n, FileSize: size, byName: map[string]int{}}
	seenMeta := false
	for dec.More() {
		name, err := stringToken(dec)
		if err != nil {
			return nil, invalidJSON("reading a key: %v", err)
		}
		if name == MetadataKey {
			if seenMeta {
				return nil, newErr(reason.TensorDuplicate, name, "the key occurs twice")
			}
			seenMeta = true
			if h.Metadata, err = parseMetadata(dec); err != nil {
				return nil, err
			}
			continue
		}
		if _, dup := h.byName[name]; dup {
			return nil, newErr(reason.TensorDuplicate, name, "the name occurs twice in the header")
		}
		if name == "" {
			return nil, newErr(reason.TensorInvalid, name, "empty tensor name")
		}
		t, err := parseTensor(dec, name)
		if err != nil {
			return nil, err
		}
		h.byName[name] = len(h.Tensors)
		h.Tensors = append(h.Tensors, t)
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, invalidJSON("header object is not closed: %v", err)
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, invalidJSON("after the header object: %v", err)
		}
		return nil, invalidJSON("unexpected %v after the header object", tok)
	}
	if err := h.validate(); err != nil {
		return nil, err
	}
	return h, nil
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("got %v, want %v", tok, d)
	}
	return nil
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("got %v, want a string", tok)
	}
	return s, nil
}

func parseMetadata(dec *json.Decoder) (map[string]string, error) {
	bad := func(format string, args ...any) error {
		return newErr(reason.MetadataInvalid, "", format, args...)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return nil, bad("__metadata__ is not an object: %v", err)
	}
	md := map[string]string{}
	for dec.More() {
		k, err := stringToken(dec)
		if err != nil {
			return nil, bad("reading a key: %v", err)
		}
		v, err := stringToken(dec)
		if err != nil {
			return nil, bad("value of %q: %v", k, err)
		}
		if _, dup := md[k]; dup {
			return nil, bad("key %q occurs twice", k)
		}
		md[k] = v
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, bad("__metadata__ is not closed: %v", err)
	}
	return md, nil
}

func parseTensor(dec *json.Decoder, name string) (TensorInfo, error) {
	bad := func(format string, args ...any) (TensorInfo, error) {
		return TensorInfo{}, newErr(reason.TensorInvalid, name, format, args...)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return bad("entry is not an object: %v", err)
	}
	t := TensorInfo{Name: name}
	var haveDType, haveShape, haveOffsets bool
	for dec.More() {
		k, err := stringToken(dec)
		if err != nil {
			return bad("reading a key: %v", err)
		}
		switch k {
		case "dtype":
			if haveDType {
				return bad("dtype occurs twice")
			}
			haveDType = true
			s, err := stringToken(dec)
			if err != nil {
				return bad("dtype: %v", err)
			}
			t.DType = DType(s)
		case "shape":
			if haveShape {
				return bad("shape occurs twice")
			}
			haveShape = true
			if t.Shape, err = intArray(dec, MaxRank); err != nil {
				return bad("shape: %v", err)
			}
		case "data_offsets":
			if haveOffsets {
				return bad("data_offsets occurs twice")
			}
			haveOffsets = true
			offs, err := intArray(dec, 2)
			if err != nil {
				return bad("data_offsets: %v", err)
			}
			if len(offs) != 2 {
				return bad("data_offsets holds %d numbers, want 2", len(offs))
			}
			t.Begin, t.End = offs[0], offs[1]
		default:
			return bad("unexpected key %q", k)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return bad("entry is not closed: %v", err)
	}
	switch {
	case !haveDType:
		return bad("dtype is missing")
	case !haveShape:
		return bad("shape is missing")
	case !haveOffsets:
		return bad("data_offsets is missing")
	}
	if t.Shape == nil {
		t.Shape = []int64{}
	}
	return t, nil
}

// intArray reads a JSON array of at most limit non-negative integers.
func intArray(dec *json.Decoder, limit int) ([]int64, error) {
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	var out []int64
	for dec.More() {
		if len(out) == limit {
			return nil, fmt.Errorf("more than %d numbers", limit)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("got %v, want an integer", tok)
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%s is not a non-negative 64-bit integer", num)
		}
		out = append(out, v)
	}
	if err := expectDelim(dec, ']'); err != nil {
		return nil, err
	}
	return out, nil
}

// byteSize returns the bytes that numel elements of d occupy, and false on
// overflow or when they do not fill whole bytes.
func byteSize(d DType, shape []int64) (int64, bool) {
	numel := uint64(1)
	for _, dim := range shape {
		hi, lo := bits.Mul64(numel, uint64(dim))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		numel = lo
	}
	hi, nbits := bits.Mul64(numel, uint64(d.Bits()))
	if hi != 0 || nbits%8 != 0 || nbits/8 > math.MaxInt64 {
		return 0, false
	}
	return int64(nbits / 8), true
}

func (h *Header) validate() error {
	dataLen := h.DataLen()
	for _, t := range h.Tensors {
		if !t.DType.Known() {
			return newErr(reason.DTypeUnknown, t.Name, "dtype %q", t.DType)
		}
		if t.Begin > t.End {
			return newErr(reason.TensorOffsetsOutOfRange, t.Name, "data_offsets [%d, %d] are reversed", t.Begin, t.End)
		}
		want, ok := byteSize(t.DType, t.Shape)
		if !ok {
			return newErr(reason.TensorSizeMismatch, t.Name, "shape %v of %s overflows or does not fill whole bytes", t.Shape, t.DType)
		}
		if want != t.End-t.Begin {
			return newErr(reason.TensorSizeMismatch, t.Name, "shape %v of %s is %d bytes, data_offsets span %d", t.Shape, t.DType, want, t.End-t.Begin)
		}
	}
	slices.SortFunc(h.Tensors, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return cmpInt(a.Begin, b.Begin)
		}
		if a.End != b.End {
			return cmpInt(a.End, b.End)
		}
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	for i, t := range h.Tensors {
		h.byName[t.Name] = i
	}
	// A file cut short shows as tensors laid end to end from 0 whose last
	// one runs past the end; anything else past the end is a bad offset.
	var cursor int64
	contiguous := true
	var prev *TensorInfo
	for i := range h.Tensors {
		t := &h.Tensors[i]
		if t.Begin == t.End {
			// An empty tensor occupies no byte, but its offset must still
			// lie in the data section.
			if t.Begin > dataLen {
				return newErr(reason.TensorOffsetsOutOfRange, t.Name, "empty tensor at %d, past the %d-byte data section", t.Begin, dataLen)
			}
			continue
		}
		if prev != nil && t.Begin < prev.End {
			return newErr(reason.TensorOffsetsOverlap, t.Name, "bytes [%d, %d) overlap tensor %q at [%d, %d)", t.Begin, t.End, prev.Name, prev.Begin, prev.End)
		}
		if t.Begin != cursor {
			contiguous = false
		}
		cursor = t.End
		prev = t
	}
	if cursor > dataLen {
		if contiguous {
			return newErr(reason.FileTruncated, prev.Name, "the data section holds %d bytes, the tensors need %d", dataLen, cursor)
		}
		return newErr(reason.TensorOffsetsOutOfRange, prev.Name, "data_offsets end at %d, past the %d-byte data section", prev.End, dataLen)
	}
	cursor = 0
	for _, t := range h.Tensors {
		if t.Begin > cursor {
			h.Gaps = append(h.Gaps, Gap{Begin: cursor, End: t.Begin})
		}
		cursor = max(cursor, t.End)
	}
	if cursor < dataLen {
		h.Gaps = append(h.Gaps, Gap{Begin: cursor, End: dataLen})
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ReadHeaderStream reads the header of a safetensors file of the given
// size from a stream (an object store download, a pipe). It reads the same
// 8+N bytes as ReadHeader and nothing after them, so the caller may close
// the stream without fetching the tensor data.
func ReadHeaderStream(r io.Reader, size int64) (*Header, error) {
	return ReadHeader(&sequentialReaderAt{r: r}, size)
}

// sequentialReaderAt serves ReadAt calls at non-decreasing offsets from a
// stream, skipping forward as needed.
type sequentialReaderAt struct {
	r   io.Reader
	pos int64
}

func (s *sequentialReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < s.pos {
		return 0, fmt.Errorf("safetensors: stream read at %d, already at %d", off, s.pos)
	}
	if off > s.pos {
		n, err := io.CopyN(io.Discard, s.r, off-s.pos)
		s.pos += n
		if err != nil {
			return 0, err
		}
	}
	n, err := io.ReadFull(s.r, p)
	s.pos += int64(n)
	return n, err
}
