package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
)

// IndexFile is the name of a sharded checkpoint's index.
const IndexFile = "model.safetensors.index.json"

// MaxIndexSize bounds the index file read into memory.
const MaxIndexSize = 64 << 20

// Index is model.safetensors.index.json: which shard holds each tensor.
type Index struct {
	// Metadata is the index's metadata object (total_size...), as decoded
	// JSON; nil when absent.
	Metadata map[string]any
	// WeightMap maps each tensor name to its shard's file name.
	WeightMap map[string]string
}

// Shards returns the distinct shard names of the index, sorted.
func (x *Index) Shards() []string {
	var out []string
	for _, s := range x.WeightMap {
		out = append(out, s)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ParseIndex decodes an index, refusing duplicate tensor names in its
// weight_map and shard names that are not plain *.safetensors file names.
func ParseIndex(data []byte) (*Index, error) {
	bad := func(format string, args ...any) error {
		return &Error{Code: reason.IndexInvalid, File: IndexFile, Detail: fmt.Sprintf(format, args...)}
	}
	if len(data) > MaxIndexSize {
		return nil, bad("index is %d bytes, over the limit of %d", len(data), MaxIndexSize)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '{'); err != nil {
		return nil, bad("not a JSON object: %v", err)
	}
	x := &Index{}
	seen := map[string]bool{}
	for dec.More() {
		k, err := stringToken(dec)
		if err != nil {
			return nil, bad("reading a key: %v", err)
		}
		if seen[k] {
			return nil, bad("key %q occurs twice", k)
		}
		seen[k] = true
		switch k {
		case "weight_map":
			if x.WeightMap, err = parseWeightMap(dec); err != nil {
				var e *Error
				if errors.As(err, &e) {
					return nil, err
				}
				return nil, bad("weight_map: %v", err)
			}
		case "metadata":
			var md map[string]any
			if err := dec.Decode(&md); err != nil {
				return nil, bad("metadata: %v", err)
			}
			x.Metadata = md
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, bad("%s: %v", k, err)
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, bad("object not closed: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, bad("trailing data after the index object")
	}
	if x.WeightMap == nil {
		return nil, bad("weight_map is missing")
	}
	for name, shard := range x.WeightMap {
		if !validShardName(shard) {
			return nil, &Error{Code: reason.IndexShardInvalidName, File: IndexFile, Tensor: name, Detail: fmt.Sprintf("shard %q", shard)}
		}
	}
	return x, nil
}

func parseWeightMap(dec *json.Decoder) (map[string]string, error) {
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for dec.More() {
		k, err := stringToken(dec)
		if err != nil {
			return nil, err
		}
		v, err := stringToken(dec)
		if err != nil {
			return nil, fmt.Errorf("shard of %q: %w", k, err)
		}
		if _, dup := m[k]; dup {
			return nil, &Error{Code: reason.TensorDuplicate, File: IndexFile, Tensor: k, Detail: "listed twice in weight_map"}
		}
		m[k] = v
	}
	return m, expectDelim(dec, '}')
}

// validShardName reports whether s is a plain file name ending in
// .safetensors: no directory part, no parent reference, nothing hidden.
func validShardName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/\\\x00:") && !strings.HasPrefix(s, ".") &&
		strings.HasSuffix(s, ".safetensors") && len(s) <= 255
}

// File is one safetensors file of a checkpoint.
type File struct {
	Name   string
	Size   int64
	Header *Header
}

// Located is a tensor entry and the file that holds it.
type Located struct {
	File string
	TensorInfo
}

// Checkpoint is the safetensors part of a checkpoint folder: every header,
// read and cross-checked against the index when there is one.
type Checkpoint struct {
	// Files are sorted by name.
	Files []File
	// Index is nil for a checkpoint without model.safetensors.index.json.
	Index *Index
	// Unindexed names *.safetensors files of the folder that the index does
	// not name; they are not read (engines skip them too).
	Unindexed []string

	tensors map[string]Located
}

// Tensor returns the named tensor and its file.
func (c *Checkpoint) Tensor(name string) (Located, bool) {
	t, ok := c.tensors[name]
	return t, ok
}

// Tensors returns every tensor of the checkpoint, sorted by name.
func (c *Checkpoint) Tensors() []Located {
	out := make([]Located, 0, len(c.tensors))
	for _, t := range c.tensors {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Located) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// FileBytes returns the total size of the checkpoint's safetensors files,
// headers included.
func (c *Checkpoint) FileBytes() int64 {
	var n int64
	for _, f := range c.Files {
		n += f.Size
	}
	return n
}

// TensorBytes returns the total size of the tensors' data.
func (c *Checkpoint) TensorBytes() int64 {
	var n int64
	for _, t := range c.tensors {
		n += t.Bytes()
	}
	return n
}

// BytesRead returns how many bytes reading the headers took.
func (c *Checkpoint) BytesRead() int64 {
	var n int64
	for _, f := range c.Files {
		n += f.Header.BytesRead
	}
	return n
}

// NewCheckpoint assembles a checkpoint from parsed files and, for a sharded
// one, its index. It refuses a tensor stored in two files, a shard the index
// names but files lack, a tensor the index places elsewhere and a tensor a
// shard holds but the index does not list.
func NewCheckpoint(files []File, idx *Index) (*Checkpoint, error) {
	c := &Checkpoint{Files: slices.Clone(files), Index: idx, tensors: map[string]Located{}}
	slices.SortFunc(c.Files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	if len(c.Files) == 0 {
		return nil, &Error{Code: reason.NoSafetensors}
	}
	byName := map[string]bool{}
	for _, f := range c.Files {
		byName[f.Name] = true
		for _, t := range f.Header.Tensors {
			if prev, dup := c.tensors[t.Name]; dup {
				return nil, &Error{Code: reason.TensorDuplicate, File: f.Name, Tensor: t.Name, Detail: "also stored in " + prev.File}
			}
			c.tensors[t.Name] = Located{File: f.Name, TensorInfo: t}
		}
	}
	if idx == nil {
		return c, nil
	}
	for _, s := range idx.Shards() {
		if !byName[s] {
			return nil, &Error{Code: reason.IndexShardMissing, File: s, Detail: "named by " + IndexFile}
		}
	}
	names := make([]string, 0, len(idx.WeightMap))
	for n := range idx.WeightMap {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		want := idx.WeightMap[n]
		got, ok := c.tensors[n]
		if !ok || got.File != want {
			where := "no shard"
			if ok {
				where = got.File
			}
			return nil, &Error{Code: reason.IndexTensorMisplaced, File: want, Tensor: n, Detail: "the index names " + want + ", the tensor is in " + where}
		}
	}
	for _, t := range c.Tensors() {
		if _, ok := idx.WeightMap[t.Name]; !ok {
			return nil, &Error{Code: reason.IndexTensorUnlisted, File: t.File, Tensor: t.Name}
		}
	}
	return c, nil
}

// ReadCheckpoint reads the safetensors headers of the checkpoint in dir.
// With model.safetensors.index.json it reads exactly the shards the index
// names; without one, every *.safetensors file at the top of dir. Files are
// opened through an os.Root, so no name escapes dir.
func ReadCheckpoint(dir string) (*Checkpoint, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, &Error{Code: reason.IOError, File: dir, Err: err}
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return nil, &Error{Code: reason.IOError, File: dir, Err: err}
	}
	sizes := map[string]int64{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			if !e.IsDir() {
				sizes[e.Name()] = notRegular
			}
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, &Error{Code: reason.IOError, File: e.Name(), Err: err}
		}
		sizes[e.Name()] = info.Size()
	}
	c, err := ReadCheckpointFrom(sizes, func(name string) (io.ReadCloser, error) { return root.Open(name) })
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == reason.NoSafetensors && e.File == "" {
			e.File = dir
		}
		return nil, err
	}
	return c, nil
}

// notRegular marks, in the sizes given to ReadCheckpointFrom, a name that
// is not a regular file (a link, a device): it is refused if read.
const notRegular = -1

// Opener opens a file of a checkpoint by name, for reading from its start.
type Opener func(name string) (io.ReadCloser, error)

// ReadCheckpointFrom reads the safetensors headers of a checkpoint whose
// top-level files and their sizes are sizes, opening each through open:
// a folder, or an artifact store that streams. It reads the index (when
// there is one, bounded by MaxIndexSize) and the first 8+N bytes of each
// shard, never tensor data: a stream is closed once its header is read.
func ReadCheckpointFrom(sizes map[string]int64, open Opener) (*Checkpoint, error) {
	var present []string
	for name := range sizes {
		if strings.HasSuffix(name, ".safetensors") {
			present = append(present, name)
		}
	}
	slices.Sort(present)
	var idx *Index
	toRead := present
	var unindexed []string
	if _, ok := sizes[IndexFile]; ok {
		data, err := readLimited(open, IndexFile, MaxIndexSize)
		if err != nil {
			return nil, err
		}
		if idx, err = ParseIndex(data); err != nil {
			return nil, err
		}
		toRead = idx.Shards()
		for _, p := range present {
			if !slices.Contains(toRead, p) {
				unindexed = append(unindexed, p)
			}
		}
	}
	if len(toRead) == 0 {
		return nil, &Error{Code: reason.NoSafetensors}
	}
	files := make([]File, 0, len(toRead))
	for _, name := range toRead {
		size, ok := sizes[name]
		if !ok {
			return nil, &Error{Code: reason.IndexShardMissing, File: name, Detail: "named by " + IndexFile}
		}
		f, err := readShard(open, name, size)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	c, err := NewCheckpoint(files, idx)
	if err != nil {
		return nil, err
	}
	c.Unindexed = unindexed
	return c, nil
}

func readShard(open Opener, name string, size int64) (File, error) {
	if size == notRegular {
		return File{}, &Error{Code: reason.IOError, File: name, Detail: "not a regular file (a link?); shards must be files in the folder"}
	}
	r, err := open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return File{}, &Error{Code: reason.IndexShardMissing, File: name, Detail: "named by " + IndexFile}
	}
	if err != nil {
		return File{}, &Error{Code: reason.IOError, File: name, Err: err}
	}
	defer r.Close()
	h, err := ReadHeaderStream(r, size)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.File == "" {
			e.File = name
		}
		return File{}, err
	}
	return File{Name: name, Size: size, Header: h}, nil
}

func readLimited(open Opener, name string, limit int64) ([]byte, error) {
	f, err := open(name)
	if err != nil {
		return nil, &Error{Code: reason.IOError, File: name, Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &Error{Code: reason.IOError, File: name, Err: err}
	}
	if int64(len(data)) > limit {
		return nil, &Error{Code: reason.IndexInvalid, File: name, Detail: fmt.Sprintf("over the limit of %d bytes", limit)}
	}
	return data, nil
}
