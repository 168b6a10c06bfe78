package enginebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
)

// PatchCommand applies a patch with GNU patch (-p1, no fuzz, no backup
// files, never asking) inside the engine sandbox, where only the tree is
// writable: a diff naming "../" or an absolute path cannot reach anything
// else. It is the stand-in for domain/enginepatch's exact applier.
type PatchCommand struct {
	// Box is the sandbox's template.
	Box engine.Box
}

// Apply applies patch to the tree in dir; its error is an *engine.Failure
// (engine_build_failed) whose LogTail is patch's output.
func (p *PatchCommand) Apply(ctx context.Context, dir string, patch []byte) error {
	box := p.Box
	box.Writable = []string{dir}
	box.Memory = DefaultMemory
	cmd, err := box.Command([]string{"patch", "-p1", "--no-backup-if-mismatch", "--fuzz=0", "--batch", "--forward", "--reject-file=-"}, dir, nil)
	if err != nil {
		return &engine.Failure{Reason: reason.EngineSandboxUnavailable, Message: fmt.Sprintf("the patch's sandbox: %v", err)}
	}
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + box.TempDir(), "LANG=C.UTF-8"}
	cmd.Stdin = bytes.NewReader(patch)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runBoxed(ctx, cmd); err != nil {
		return &engine.Failure{Reason: reason.EngineBuildFailed, LogTail: out.String(), Exit: err.Error(),
			Message: fmt.Sprintf("patch -p1 --fuzz=0 failed (%v)", err)}
	}
	return nil
}

// copyTree copies the regular files, folders and links of src into dst
// (created), keeping each file's executable bits.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case fi.Mode().IsRegular():
			return copyFile(p, to, 0o644|fi.Mode().Perm()&0o111)
		}
		return nil // devices, sockets and pipes are no source
	})
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// overlay lays a patched Python package over the installed one: pkg
// becomes a tree of links to install's files, except the files that
// patched (the patched copy of the pinned source orig) adds or changes,
// which are copied, and the ones it removes, which are left out. The
// links point into the image's read-only install, which the sandbox sees
// at the same path.
func overlay(install, orig, patched, pkg string) error {
	if err := filepath.WalkDir(install, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(install, p)
		if err != nil {
			return err
		}
		to := filepath.Join(pkg, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if d.Name() == "__pycache__" {
			return nil
		}
		return os.Symlink(p, to)
	}); err != nil {
		return err
	}
	// Files the patch removed.
	if err := filepath.WalkDir(orig, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(orig, p)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(patched, rel)); errors.Is(err, fs.ErrNotExist) {
			return os.Remove(filepath.Join(pkg, rel))
		}
		return nil
	}); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// Files it added or changed.
	return filepath.WalkDir(patched, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(patched, p)
		if err != nil {
			return err
		}
		if same(p, filepath.Join(orig, rel)) {
			return nil
		}
		to := filepath.Join(pkg, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.Remove(to); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return copyFile(p, to, 0o644)
	})
}

// same reports whether files a and b both exist with the same content.
func same(a, b string) bool {
	x, err := os.ReadFile(a)
	if err != nil {
		return false
	}
	y, err := os.ReadFile(b)
	return err == nil && bytes.Equal(x, y)
}

// lookGo finds the go command.
func lookGo() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(p)
}
