package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// CheckpointFile is the name, inside a bundle, of a checkpoint submitted
// by reference: the repository that holds it and every file of it the
// arena reads, each with its size and sha256.
//
//	{
//	  "repository": "https://huggingface.co/ORG/NAME",
//	  "revision": "<commit, branch or tag; a commit pins it>",
//	  "files": [
//	    {"path": "config.json", "size": 1894, "sha256": "..."},
//	    {"path": "model.safetensors.index.json", "size": 3266, "sha256": "..."},
//	    {"path": "model-00001-of-00002.safetensors", "size": 4988160000, "sha256": "..."},
//	    ...
//	  ]
//	}
//
// The shards (*.safetensors) stay in the repository: the contract stage
// reads their headers with HTTP Range requests and the runner stages them
// onto its pod, checking each digest. Every other file listed (config,
// index, tokenizer files) is fetched whole by the build stage, checked and
// stored with the bundle. The bundle itself holds submission.json,
// checkpoint.json and, optionally, an engine patch and small files of the
// checkpoint it carries instead of listing them.
const CheckpointFile = "checkpoint.json"

// Limits of checkpoint.json.
const (
	MaxReferenceBytes = 4 << 20
	MaxReferenceFiles = 2000
)

// Reference is checkpoint.json: a checkpoint submitted by reference.
type Reference struct {
	// Repository is the repository's base URL (https, no credentials).
	Repository string `json:"repository"`
	// Revision is the commit, branch or tag the files are read at.
	Revision string `json:"revision"`
	// Files are the checkpoint's files, sorted by path once parsed.
	Files []ReferencedFile `json:"files"`
}

// ReferencedFile is one file of a checkpoint by reference.
type ReferencedFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseReference decodes and validates checkpoint.json, reporting every
// problem of its files at once. Unknown fields are refused. A repository
// URL that is not one (or carries credentials) is refused with its hub
// code, and the credentials are never echoed.
func ParseReference(data []byte) (*Reference, error) {
	bad := func(format string, args ...any) error {
		return &Error{Code: reason.BundleBadReference, Message: CheckpointFile + ": " + fmt.Sprintf(format, args...)}
	}
	if len(data) > MaxReferenceBytes {
		return nil, bad("%d bytes; the limit is %d", len(data), MaxReferenceBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r Reference
	if err := dec.Decode(&r); err != nil {
		return nil, &Error{Code: reason.BundleBadReference, Message: fmt.Sprintf("%s is not valid: %v", CheckpointFile, err), Err: err}
	}
	if _, err := r.Repo(); err != nil {
		he := modelrepo.AsError(err)
		return nil, &Error{Code: he.Code, Message: CheckpointFile + ": " + he.Message, Err: err}
	}
	if len(r.Files) == 0 {
		return nil, bad("files is empty; list every file of the checkpoint the arena reads, each with its path, size and sha256")
	}
	if len(r.Files) > MaxReferenceFiles {
		return nil, bad("%d files; the limit is %d", len(r.Files), MaxReferenceFiles)
	}
	var errs []string
	seen := map[string]bool{}
	shards := 0
	for i, f := range r.Files {
		where := fmt.Sprintf("files[%d]", i)
		if f.Path != "" {
			where += " (" + f.Path + ")"
		}
		switch {
		case !referencePath(f.Path):
			errs = append(errs, where+": path must be a relative path of plain names (letters, digits and ._+-) inside the repository")
		case seen[f.Path]:
			errs = append(errs, where+": listed twice")
		}
		seen[f.Path] = true
		if f.Size < 0 {
			errs = append(errs, where+": size is negative")
		}
		if !sha256Hex.MatchString(f.SHA256) {
			errs = append(errs, where+": sha256 must be 64 lowercase hex digits")
		}
		if Remote(f.Path) {
			shards++
			if strings.Contains(f.Path, "/") {
				errs = append(errs, where+": safetensors files belong at the top of the repository, beside config.json")
			}
		}
	}
	if shards == 0 {
		errs = append(errs, "no *.safetensors file is listed; the checkpoint's weights are read from its safetensors shards")
	}
	if !seen["config.json"] {
		errs = append(errs, "config.json is not listed; the checkpoint's config (with its quantization_config) is required")
	}
	if len(errs) > 0 {
		return nil, bad("%s", strings.Join(errs, "; "))
	}
	slices.SortFunc(r.Files, func(a, b ReferencedFile) int { return strings.Compare(a.Path, b.Path) })
	return &r, nil
}

// referencePath reports whether p is a relative slash path of plain names,
// at most four deep, as the build stage accepts in a bundle.
func referencePath(p string) bool {
	if p == "" || !Local(p) || path.Clean(p) != p {
		return false
	}
	parts := strings.Split(p, "/")
	if len(parts) > 4 {
		return false
	}
	for _, s := range parts {
		if !plainName.MatchString(s) {
			return false
		}
	}
	return true
}

// plainName starts with a letter or digit (nothing hidden) and holds only
// letters, digits and ._+-.
var plainName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$`)

// Remote reports whether the file at path stays in the repository (a
// safetensors shard) rather than being fetched by the build stage and
// stored with the bundle. The contract stage and the runner read shards
// from the repository; everything else from the artifact store.
func Remote(path string) bool { return strings.HasSuffix(strings.ToLower(path), ".safetensors") }

// Repo is the reference's repository and revision, checked.
func (r *Reference) Repo() (modelrepo.Repo, error) { return modelrepo.Parse(r.Repository, r.Revision) }

// File returns the listed file at path.
func (r *Reference) File(p string) (ReferencedFile, bool) {
	i, ok := slices.BinarySearchFunc(r.Files, p, func(f ReferencedFile, p string) int { return strings.Compare(f.Path, p) })
	if !ok {
		return ReferencedFile{}, false
	}
	return r.Files[i], true
}

// Bytes is the total size of the listed files.
func (r *Reference) Bytes() int64 {
	var n int64
	for _, f := range r.Files {
		n += f.Size
	}
	return n
}

// Hub is the file as the repository client reads it.
func (f ReferencedFile) Hub() modelrepo.File {
	return modelrepo.File{Path: f.Path, Size: f.Size, SHA256: f.SHA256}
}

// ReadReference reads and validates dir/checkpoint.json; (nil, nil) when
// dir has none (the checkpoint is in the bundle itself).
func ReadReference(dir string) (*Reference, error) {
	f, err := os.Open(filepath.Join(dir, CheckpointFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxReferenceBytes+1))
	if err != nil {
		return nil, fmt.Errorf("bundle: read %s: %w", CheckpointFile, err)
	}
	return ParseReference(data)
}

// WriteReference writes r as checkpoint.json into dir, indented, files
// sorted by path.
func WriteReference(dir string, r Reference) error {
	r.Files = slices.Clone(r.Files)
	slices.SortFunc(r.Files, func(a, b ReferencedFile) int { return strings.Compare(a.Path, b.Path) })
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, CheckpointFile), append(data, '\n'), 0o644)
}
