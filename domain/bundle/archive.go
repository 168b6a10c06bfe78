package bundle

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/lowbarena/lowbarena/events/reason"
)

// Inspection is what Inspect reads of a packed bundle: its declaration,
// its checkpoint.json when it has one, and its regular files.
type Inspection struct {
	Declaration *Declaration
	// Reference is nil for a bundle that carries its checkpoint.
	Reference *Reference
	// Files counts the regular files, Bytes their unpacked size.
	Files int
	Bytes int64
}

// Inspect reads a packed bundle (the gzip'd tar Pack writes) from r to
// its end without writing anything: it parses submission.json and, when
// present, checkpoint.json (each at the top of the archive, named as the
// build stage names them after cleaning the path), and counts the files.
// It is what the gateway reads before it accepts an upload; the build
// stage checks everything else when it unpacks.
//
// Bounds: at most maxUnpacked bytes are inflated (a gzip bomb is refused
// with reason.BundleCompressionRatio before it costs more), at most MaxFiles entries are
// read, and the two JSON files are read within their own limits.
func Inspect(r io.Reader, maxUnpacked int64) (*Inspection, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, &Error{Code: reason.BundleCorrupt, Message: "the upload is not a gzip'd tar archive (arena submit packs one)", Err: err}
	}
	cr := &capReader{r: zr, left: maxUnpacked}
	tr := tar.NewReader(cr)
	var in Inspection
	var decl, ref []byte
	entries := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, inspectErr(cr, maxUnpacked, err)
		}
		if entries++; entries > MaxFiles {
			return nil, &Error{Code: reason.BundleTooManyFiles, Message: fmt.Sprintf("the bundle has more than %d entries", MaxFiles)}
		}
		if hdr.Typeflag != tar.TypeReg {
			continue // the build refuses what is not a file or a folder
		}
		in.Files++
		in.Bytes += hdr.Size
		name := strings.TrimSuffix(path.Clean(hdr.Name), "/")
		var dst *[]byte
		limit := int64(0)
		switch name {
		case DeclarationFile:
			dst, limit = &decl, MaxDeclarationBytes
		case CheckpointFile:
			dst, limit = &ref, MaxReferenceBytes
		default:
			continue // skipped by tar.Reader.Next, within the cap
		}
		if *dst != nil {
			return nil, &Error{Code: reason.BundleDuplicateFile, Message: fmt.Sprintf("%s appears twice in the archive", name)}
		}
		if hdr.Size > limit {
			return nil, &Error{Code: reason.BundleBadDeclaration, Message: fmt.Sprintf("%s is %d bytes; the limit is %d", name, hdr.Size, limit)}
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, inspectErr(cr, maxUnpacked, err)
		}
		*dst = b
	}
	// The gzip trailer: a truncated stream is refused here too.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, inspectErr(cr, maxUnpacked, err)
	}
	if decl == nil {
		return nil, &Error{Code: reason.BundleNoDeclaration, Message: "the bundle has no " + DeclarationFile + "; a bundle declares its task, split, participant and solution there"}
	}
	if in.Declaration, err = ParseDeclaration(decl); err != nil {
		return nil, err
	}
	if ref != nil {
		if in.Reference, err = ParseReference(ref); err != nil {
			return nil, err
		}
	}
	return &in, nil
}

var errInflates = errors.New("bundle: inflates past its cap")

func inspectErr(cr *capReader, maxUnpacked int64, err error) error {
	if errors.Is(err, errInflates) {
		return &Error{Code: reason.BundleCompressionRatio, Message: fmt.Sprintf(
			"the archive unpacks to more than %s before its end, far more than an honest checkpoint of its size; pack the bundle with arena submit", HumanSize(maxUnpacked)), Err: err}
	}
	return &Error{Code: reason.BundleCorrupt, Message: "the bundle archive is truncated or damaged; pack and upload it again", Err: err}
}

// capReader fails with errInflates once more than left bytes were read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, errInflates
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, errInflates
	}
	return n, err
}

// HumanSize writes n bytes for people, in binary units ("2.0 GiB").
func HumanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
