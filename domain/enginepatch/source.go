package enginepatch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Kinds of a tree entry.
const (
	kindFile = 'f'
	kindLink = 'l'
)

// entry is one file of a tree: a regular file (its content's sha256) or
// a symbolic link (its target's sha256).
type entry struct {
	kind byte
	sum  string
	exec bool
}

// Source is a pinned engine source tree with its rules, hashed once: a
// Source is never changed after Open, so one may check and apply any
// number of patches, concurrently.
type Source struct {
	// Spec is the campaign's rules for patches.
	Spec campaign.EngineSource
	// Root is the source tree's folder.
	Root string
	// Digest is the tree's digest (TreeDigest).
	Digest string

	entries map[string]entry
}

// ForCampaign opens the engine source c pins: EngineSource.Dir inside
// the campaign folder. A campaign that pins none is refused with
// reason.PatchUnknownSource; a Dir that escapes the campaign folder or
// does not exist is an error (the campaign is the operator's to fix).
func ForCampaign(c *campaign.Campaign) (*Source, error) {
	if c == nil || c.Engine == nil || c.Engine.Source == nil {
		task := ""
		if c != nil {
			task = c.TaskID
		}
		return nil, refuse(reason.PatchUnknownSource, "the campaign of task %s pins no engine source (engine.source in campaign.json), so it takes no engine patch; submit without engine.patch", task)
	}
	dir := c.Engine.Source.Dir
	if !filepath.IsLocal(filepath.FromSlash(dir)) {
		return nil, fmt.Errorf("enginepatch: campaign %s: engine.source.dir %q is not a folder inside the campaign folder", c.TaskID, dir)
	}
	return Open(c.Engine.Source, filepath.Join(c.Dir, filepath.FromSlash(dir)))
}

// Open hashes the source tree at root, held to spec's rules. A nil spec
// is refused with reason.PatchUnknownSource.
func Open(spec *campaign.EngineSource, root string) (*Source, error) {
	if spec == nil {
		return nil, refuse(reason.PatchUnknownSource, "the campaign pins no engine source, so it takes no engine patch; submit without engine.patch")
	}
	entries, err := walk(root)
	if err != nil {
		return nil, err
	}
	return &Source{Spec: *spec, Root: root, Digest: digest(entries), entries: entries}, nil
}

// TreeDigest returns the digest of the tree at root: the sha256 over its
// files sorted by slash path, each as its path and its content's sha256
// (a symbolic link as its target's). Folders, modes and times are not in
// it, so the same content has the same digest wherever it is unpacked.
func TreeDigest(root string) (string, error) {
	entries, err := walk(root)
	if err != nil {
		return "", err
	}
	return digest(entries), nil
}

func walk(root string) (map[string]entry, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("enginepatch: engine source: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("enginepatch: engine source %s is not a folder", root)
	}
	entries := map[string]entry{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256([]byte(target))
			entries[name] = entry{kind: kindLink, sum: hex.EncodeToString(s[:])}
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			sum, err := hashFile(p)
			if err != nil {
				return err
			}
			entries[name] = entry{kind: kindFile, sum: sum, exec: info.Mode()&0o111 != 0}
		default:
			return fmt.Errorf("%s is neither a file, a folder nor a symbolic link", name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("enginepatch: engine source %s: %w", root, err)
	}
	return entries, nil
}

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// digest is the tree digest of entries (see TreeDigest). Each entry is
// written as kind, content digest and path, NUL-terminated: no path holds
// a NUL, so no two trees write the same bytes.
func digest(entries map[string]entry) string {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	h.Write([]byte("lowbarena-engine-tree-v1\x00"))
	for _, n := range names {
		e := entries[n]
		fmt.Fprintf(h, "%c %s %s\x00", e.kind, e.sum, n)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Check checks patch against the source and its rules and returns its
// summary, or an *Error saying why it is refused. It writes nothing.
func (s *Source) Check(patch []byte) (Summary, error) {
	sum, _, err := s.apply(patch)
	return sum, err
}

// Apply checks patch as Check does and writes the patched tree to dst,
// which must not exist yet (it is created; its parent must exist). The
// tree Apply writes has the digest Summary.EngineDigest. A refused patch
// writes nothing.
//
// Files keep their source's modes; a new file is 0644, or 0755 when the
// patch gives it git's mode 100755 (or a mode change does).
func (s *Source) Apply(patch []byte, dst string) (Summary, error) {
	sum, out, err := s.apply(patch)
	if err != nil {
		return Summary{}, err
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return Summary{}, fmt.Errorf("enginepatch: %w", err)
	}
	if err := s.copyTree(dst, out); err != nil {
		return Summary{}, err
	}
	for _, name := range sortedKeys(out) {
		r := out[name]
		if r.gone {
			continue
		}
		p := filepath.Join(dst, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return Summary{}, fmt.Errorf("enginepatch: %w", err)
		}
		mode := os.FileMode(0o644)
		if r.exec {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(r.content), mode); err != nil {
			return Summary{}, fmt.Errorf("enginepatch: write %s: %w", name, err)
		}
	}
	return sum, nil
}

// copyTree copies the source tree into dst, less the files out changes
// (written after by Apply).
func (s *Source) copyTree(dst string, out map[string]result) error {
	err := filepath.WalkDir(s.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(s.Root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		name := filepath.ToSlash(rel)
		target := filepath.Join(dst, rel)
		if _, changed := out[name]; changed {
			return nil
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		}
		return copyFile(p, target, s.entries[name].exec)
	})
	if err != nil {
		return fmt.Errorf("enginepatch: copy the engine source: %w", err)
	}
	return nil
}

func copyFile(src, dst string, exec bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	mode := os.FileMode(0o644)
	if exec {
		mode = 0o755
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// readSource reads a file of the source tree, held to the digest Open
// found: the tree must not change under a Source.
func (s *Source) readSource(name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(s.Root, filepath.FromSlash(name)))
	if err != nil {
		return "", fmt.Errorf("enginepatch: engine source: %w", err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != s.entries[name].sum {
		return "", fmt.Errorf("enginepatch: engine source %s changed since it was opened (%s)", s.Root, name)
	}
	return string(data), nil
}

// hasLinkOnPath says whether name, or a folder on its way, is a symbolic
// link of the source tree, and which.
func (s *Source) hasLinkOnPath(name string) (string, bool) {
	parts := strings.Split(name, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if e, ok := s.entries[p]; ok && e.kind == kindLink {
			return p, true
		}
	}
	return "", false
}

// fileOnPath says whether a folder on name's way is a file of the tree.
func (s *Source) fileOnPath(name string) (string, bool) {
	parts := strings.Split(name, "/")
	for i := range len(parts) - 1 {
		p := strings.Join(parts[:i+1], "/")
		if _, ok := s.entries[p]; ok {
			return p, true
		}
	}
	return "", false
}
