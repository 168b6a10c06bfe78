// Package bundle is the submission bundle as it travels: the participant's
// declaration (submission.json) and the deterministic archive the CLI
// uploads and the build stage unpacks.
//
// A bundle is a folder holding submission.json and the checkpoint
// (config.json, *.safetensors, tokenizer files). Pack writes it as a gzip'd
// tar with sorted names, zeroed times and fixed modes, so the same folder
// always yields the same bytes and the same sha256.
package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events/reason"
)

// DeclarationFile is the name of the declaration inside a bundle.
const DeclarationFile = "submission.json"

// Limits of what the CLI packs. The build stage applies its own, stricter
// checks on what it unpacks.
const (
	MaxDeclarationBytes = 1 << 20
	MaxFiles            = 10_000
)

// Error is a refusal with a stable code and a sentence the participant can
// act on.
type Error struct {
	Code    reason.Code
	Message string
	Err     error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Declaration is submission.json: what the participant says the bundle is.
type Declaration struct {
	// TaskID names the campaign's model (a valid subject token).
	TaskID string `json:"task_id"`
	// Split is dev (feedback, never ranked) or ranked.
	Split       string `json:"split"`
	Participant string `json:"participant"`
	Agent       string `json:"agent,omitempty"`
	// Track defaults to "engine".
	Track    string   `json:"track,omitempty"`
	Solution Solution `json:"solution"`
	// Engine says how the checkpoint is served; the runner fills a command
	// template. Optional until the runner exists.
	Engine *Engine `json:"engine,omitempty"`
}

// Solution is the participant's description of the checkpoint.
type Solution struct {
	Checkpoint string `json:"checkpoint"`
	Method     string `json:"method"`
	// Precision is the declared label W{w}A{a}KV{kv}, or "" when none was
	// declared.
	Precision string `json:"precision,omitempty"`
}

// Engine is the inference engine a submission asks for.
type Engine struct {
	Image   string `json:"image,omitempty"`
	Command string `json:"command,omitempty"`
	// Patch is the path, inside the bundle, of an optional engine patch.
	Patch string `json:"patch,omitempty"`
	// KVCacheDType is the KV cache dtype the engine runs with, as vLLM and
	// SGLang spell it (fp8, nvfp4, auto...); it fills {{.KVCacheDType}} and
	// is the KV part of the detected precision. Empty means auto.
	KVCacheDType string `json:"kv_cache_dtype,omitempty"`
}

var (
	precisionLabel = regexp.MustCompile(`^W[0-9]+A[0-9]+KV[0-9]+$`)
	kvDType        = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
)

// Validate reports every problem of d at once.
func (d *Declaration) Validate() error {
	var errs []string
	if !record.ValidID(d.TaskID) {
		errs = append(errs, fmt.Sprintf("task_id %q must be 1-128 letters, digits, '-' or '_'", d.TaskID))
	}
	if d.Split != "dev" && d.Split != "ranked" {
		errs = append(errs, fmt.Sprintf("split %q must be dev or ranked", d.Split))
	}
	if strings.TrimSpace(d.Participant) == "" {
		errs = append(errs, "participant is empty")
	}
	if strings.TrimSpace(d.Solution.Checkpoint) == "" {
		errs = append(errs, "solution.checkpoint is empty")
	}
	if p := d.Solution.Precision; p != "" && !precisionLabel.MatchString(p) {
		errs = append(errs, fmt.Sprintf("solution.precision %q is not of the form W{w}A{a}KV{kv}, e.g. W4A16KV8", p))
	}
	if d.Engine != nil && d.Engine.KVCacheDType != "" && !kvDType.MatchString(d.Engine.KVCacheDType) {
		errs = append(errs, fmt.Sprintf("engine.kv_cache_dtype %q must be a dtype name such as fp8, nvfp4 or auto", d.Engine.KVCacheDType))
	}
	if d.Engine != nil && d.Engine.Patch != "" && !Local(d.Engine.Patch) {
		errs = append(errs, fmt.Sprintf("engine.patch %q must be a path inside the bundle", d.Engine.Patch))
	}
	if len(errs) > 0 {
		return &Error{Code: reason.BundleBadDeclaration, Message: DeclarationFile + ": " + strings.Join(errs, "; ")}
	}
	return nil
}

// Local reports whether name is a relative slash path that stays inside its
// folder.
func Local(name string) bool {
	return name != "" && filepath.IsLocal(filepath.FromSlash(name)) && !strings.Contains(name, "\\")
}

// ParseDeclaration decodes and validates submission.json. Unknown fields are
// refused, so a misspelt key is not silently ignored.
func ParseDeclaration(data []byte) (*Declaration, error) {
	if len(data) > MaxDeclarationBytes {
		return nil, &Error{Code: reason.BundleBadDeclaration, Message: fmt.Sprintf("%s is %d bytes; the limit is %d", DeclarationFile, len(data), MaxDeclarationBytes)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d Declaration
	if err := dec.Decode(&d); err != nil {
		return nil, &Error{Code: reason.BundleBadDeclaration, Message: fmt.Sprintf("%s is not valid: %v", DeclarationFile, err), Err: err}
	}
	if d.Track == "" {
		d.Track = "engine"
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// ReadDeclaration reads and validates dir/submission.json.
func ReadDeclaration(dir string) (*Declaration, error) {
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return nil, &Error{Code: reason.BundleNotAFolder, Message: fmt.Sprintf("%s is not a folder", dir), Err: err}
	}
	f, err := os.Open(filepath.Join(dir, DeclarationFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &Error{Code: reason.BundleNoDeclaration, Message: fmt.Sprintf("%s has no %s; a bundle declares its task, split, participant and solution there", dir, DeclarationFile), Err: err}
		}
		return nil, fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxDeclarationBytes+1))
	if err != nil {
		return nil, fmt.Errorf("bundle: read %s: %w", DeclarationFile, err)
	}
	return ParseDeclaration(data)
}

// Summary describes a packed archive.
type Summary struct {
	// Files is the count of files, Bytes their total size (unpacked).
	Files int
	Bytes int64
	// Size and SHA256 describe the archive itself.
	Size   int64
	SHA256 string
}

// Pack writes the files under dir to w as a deterministic tar.gz. Symbolic
// links are refused (a link could point outside the bundle); only regular
// files and folders are packed.
func Pack(dir string, w io.Writer) (Summary, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			return &Error{Code: reason.BundleSymlink, Message: fmt.Sprintf("%s is a symbolic link; copy the file into the bundle instead", filepath.ToSlash(rel))}
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return &Error{Code: reason.BundleSymlink, Message: fmt.Sprintf("%s is not a regular file", filepath.ToSlash(rel))}
		}
		names = append(names, filepath.ToSlash(rel))
		if len(names) > MaxFiles {
			return &Error{Code: reason.BundleTooManyFiles, Message: fmt.Sprintf("the bundle has more than %d files", MaxFiles)}
		}
		return nil
	})
	if err != nil {
		var be *Error
		if errors.As(err, &be) {
			return Summary{}, be
		}
		return Summary{}, fmt.Errorf("bundle: walk %s: %w", dir, err)
	}
	sort.Strings(names)

	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	zw, _ := gzip.NewWriterLevel(cw, gzip.BestSpeed)
	zw.ModTime = time.Time{}
	tw := tar.NewWriter(zw)
	var sum Summary
	for _, name := range names {
		if err := addFile(tw, filepath.Join(dir, filepath.FromSlash(name)), name, &sum); err != nil {
			return Summary{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return Summary{}, fmt.Errorf("bundle: close tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return Summary{}, fmt.Errorf("bundle: close gzip: %w", err)
	}
	sum.Size = cw.n
	sum.SHA256 = hex.EncodeToString(h.Sum(nil))
	return sum, nil
}

func addFile(tw *tar.Writer, path, name string, sum *Summary) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: st.Size(), Mode: 0o644, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("bundle: tar header %s: %w", name, err)
	}
	n, err := io.Copy(tw, f)
	if err != nil {
		return fmt.Errorf("bundle: pack %s: %w", name, err)
	}
	if n != st.Size() {
		return fmt.Errorf("bundle: %s changed size while packing", name)
	}
	sum.Files++
	sum.Bytes += n
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
