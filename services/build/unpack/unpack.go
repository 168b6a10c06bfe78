// Package unpack turns an uploaded bundle archive into a checked folder and
// its manifest. It trusts nothing in the archive: names are confined to the
// folder (no absolute paths, no "..", no links), sizes and counts are
// bounded before anything is written, and every refusal is an *Error with
// a stable code and a sentence the participant can act on.
package unpack

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Codes returns every code, for tests and documentation.
func Codes() []reason.Code {
	return []reason.Code{
		reason.BundleNotFound, reason.BundleDigestMismatch, reason.BundleCorrupt,
		reason.BundlePathTraversal, reason.BundleBadEntry, reason.BundleBadName,
		reason.BundleDuplicateFile, reason.BundleTooManyFiles, reason.BundleTooLarge,
		reason.BundleFileTooLarge, reason.BundleUnsafeFile, reason.BundleCodeFile,
		reason.BundleUnexpectedFile, reason.BundleNoDeclaration, reason.BundleBadDeclaration,
		reason.BundleDeclarationMismatch, reason.BundleMissingConfig, reason.BundleBadConfig,
		reason.BundleNoSafetensors, reason.BundleMissingPatch, reason.BundleUploadTooLarge,
		reason.BundleReferenceConflict,
	}
}

// Error is a refusal of the bundle.
type Error struct {
	Code    reason.Code
	Message string
	Err     error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

func refuse(code reason.Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns the *Error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Limits bound what a bundle may hold.
type Limits struct {
	// MaxFiles bounds the number of files.
	MaxFiles int
	// MaxBytes bounds the total unpacked size.
	MaxBytes int64
	// MaxFileBytes bounds one file.
	MaxFileBytes int64
	// MaxDepth bounds folder nesting (1: files at the top only).
	MaxDepth int
}

// DefaultLimits fit the largest open checkpoints of the campaign families
// (a 235B model in BF16 is about 470 GB in 5 GB shards), uploaded or by
// reference; how large an upload may be is the build's own limit
// (DefaultMaxUploadBytes).
func DefaultLimits() Limits {
	return Limits{MaxFiles: 2000, MaxBytes: 1 << 40, MaxFileBytes: 64 << 30, MaxDepth: 4}
}

// DefaultMaxUploadBytes bounds an uploaded archive: uploads through the
// object store are for small bundles (a checkpoint of a few GB at most);
// larger checkpoints are submitted by reference.
const DefaultMaxUploadBytes = 2 << 30

// WithDefaults returns l with every unset limit at its default.
func (l Limits) WithDefaults() Limits { return l.withDefaults() }

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = d.MaxFileBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	return l
}

// component is one element of a bundle path: it starts with a letter or
// digit (nothing hidden), and holds only letters, digits and ._+-.
var component = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$`)

// CheckName refuses a path that could escape the folder or that is not a
// plain name.
func CheckName(name string, maxDepth int) error {
	clean := path.Clean(name)
	if name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || strings.ContainsRune(name, 0) ||
		clean == ".." || strings.HasPrefix(clean, "../") || strings.Contains("/"+name+"/", "/../") {
		return refuse(reason.BundlePathTraversal, "%q points outside the bundle; names must be relative paths inside it", name)
	}
	parts := strings.Split(strings.TrimSuffix(name, "/"), "/")
	if len(parts) > maxDepth {
		return refuse(reason.BundleBadName, "%q is nested %d folders deep; the limit is %d", name, len(parts)-1, maxDepth-1)
	}
	for _, p := range parts {
		if !component.MatchString(p) {
			return refuse(reason.BundleBadName, "%q has a name part %q that is hidden, empty or uses characters other than letters, digits and ._+-", name, p)
		}
	}
	return nil
}

// stripDotSlash drops the leading "./" (repeated, as in "././x") of an
// archive entry's name; the entry "./" (or ".") becomes "".
func stripDotSlash(name string) string {
	for strings.HasPrefix(name, "./") {
		name = name[2:]
	}
	if name == "." {
		return ""
	}
	return name
}

// Unpack reads a gzip'd tar from r into dir (which must exist and be
// empty), hashing every file as it is written, and returns the files
// sorted by path. Folders are created as needed; any entry other than a
// regular file or a folder is refused.
func Unpack(r io.Reader, dir string, lim Limits) ([]events.FileDigest, error) {
	lim = lim.withDefaults()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	defer root.Close()

	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, &Error{Code: reason.BundleCorrupt, Message: "the bundle is not a gzip'd tar archive (arena submit packs one)", Err: err}
	}
	tr := tar.NewReader(zr)
	seen := map[string]bool{}
	var files []events.FileDigest
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &Error{Code: reason.BundleCorrupt, Message: "the bundle archive is truncated or damaged; pack and upload it again", Err: err}
		}
		// `tar -C DIR -czf bundle.tgz .` names every entry "./x" and
		// adds the folder itself as "./": the prefix is dropped and the
		// folder skipped, so such an archive unpacks as if packed by name.
		// Only a leading "./" goes; "x/./y" and hidden names are still
		// refused below.
		entryName := stripDotSlash(hdr.Name)
		if entryName == "" && hdr.Typeflag == tar.TypeDir {
			continue
		}
		if err := CheckName(entryName, lim.MaxDepth); err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(path.Clean(entryName), "/")
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return nil, fmt.Errorf("unpack: mkdir %s: %w", name, err)
			}
			continue
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, refuse(reason.BundleBadEntry, "%s is a link; bundles hold regular files only (copy the file in instead)", name)
		default:
			return nil, refuse(reason.BundleBadEntry, "%s is not a regular file (tar type %q); bundles hold regular files only", name, hdr.Typeflag)
		}
		if seen[name] {
			return nil, refuse(reason.BundleDuplicateFile, "%s appears twice in the archive", name)
		}
		seen[name] = true
		if len(files) >= lim.MaxFiles {
			return nil, refuse(reason.BundleTooManyFiles, "the bundle has more than %d files", lim.MaxFiles)
		}
		if hdr.Size < 0 || hdr.Size > lim.MaxFileBytes {
			return nil, refuse(reason.BundleFileTooLarge, "%s is %d bytes; one file may be at most %d (shard the checkpoint)", name, hdr.Size, lim.MaxFileBytes)
		}
		if total+hdr.Size > lim.MaxBytes {
			return nil, refuse(reason.BundleTooLarge, "the bundle holds more than %d bytes", lim.MaxBytes)
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("unpack: mkdir %s: %w", d, err)
			}
		}
		fd, err := writeFile(root, name, tr, hdr.Size)
		if err != nil {
			return nil, err
		}
		total += fd.Size
		files = append(files, fd)
	}
	// Read the gzip trailer, so a truncated stream is caught and the
	// caller's hash covers every byte.
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return nil, &Error{Code: reason.BundleCorrupt, Message: "the bundle archive is truncated or damaged; pack and upload it again", Err: err}
	}
	sortFiles(files)
	return files, nil
}

func writeFile(root *os.Root, name string, r io.Reader, size int64) (events.FileDigest, error) {
	f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return events.FileDigest{}, fmt.Errorf("unpack: create %s: %w", name, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return events.FileDigest{}, &Error{Code: reason.BundleCorrupt, Message: fmt.Sprintf("%s is cut short in the archive; pack and upload it again", name), Err: err}
		}
		return events.FileDigest{}, fmt.Errorf("unpack: write %s: %w", name, err)
	}
	if n != size {
		return events.FileDigest{}, refuse(reason.BundleCorrupt, "%s holds %d bytes, its tar header says %d", name, n, size)
	}
	return events.FileDigest{Path: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func sortFiles(fs []events.FileDigest) {
	slices.SortFunc(fs, func(a, b events.FileDigest) int { return strings.Compare(a.Path, b.Path) })
}
