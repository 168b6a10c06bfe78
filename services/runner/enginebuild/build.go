// Package enginebuild builds a participant's patched engine on the
// runner, once per pod: it applies the patch to a copy of the campaign's
// pinned engine source, builds the patched tree with the campaign's build
// command inside the engine sandbox (engine.Box: offline, only the tree,
// the toolchain and a build cache of its own, within a time and a memory
// limit), and keeps the result in a content-addressed cache,
// WORK/engines/<digest>, that every runner of the pod shares. A Python
// engine is not compiled: its patched files are laid over the package the
// image installed, in an overlay folder put first on PYTHONPATH.
package enginebuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"text/template"
	"time"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
)

// Defaults of a Builder.
const (
	// DefaultTimeout bounds one build's wall-clock time.
	DefaultTimeout = 10 * time.Minute
	// DefaultMemory bounds each build process's address space
	// (RLIMIT_AS): the Go compiler and linker of an engine the size of
	// simengine stay far below it.
	DefaultMemory = 8 << 30
	// tailLines is how many of a build log's last lines a failure keeps.
	tailLines = 40
	// logBytes is how much of a build's log is read at most.
	logBytes = 1 << 20
)

// Names inside a built engine's folder.
const (
	// BinDir holds the built program (Build's {{.Out}}), named after the
	// source's folder ("simengine"), so the runner knows its family.
	BinDir = "bin"
	// SiteDir is a Python engine's overlay folder, first on PYTHONPATH.
	SiteDir = "site"
	// manifestFile marks a complete build and describes it.
	manifestFile = "built.json"
)

// Applier applies a unified diff to a source tree in place, exactly (no
// fuzz, no offset a hunk's context does not pin): domain/enginepatch's
// applier, or PatchCommand until the integration swaps it in. Its error
// says why the patch does not apply.
type Applier interface {
	Apply(ctx context.Context, dir string, patch []byte) error
}

// Builder builds patched engines into its cache. Several Builders (the
// pod's runners, in one process or several) may share Dir: a lock file per
// digest makes the first build it and the others wait and re-use it.
type Builder struct {
	// Dir is the cache, WORK/engines.
	Dir string
	// Box is the sandbox's template (its Bwrap, Helper, System and Extra);
	// each build binds its own folders.
	Box engine.Box
	// Applier applies the patch; default PatchCommand in Box.
	Applier Applier
	// Timeout bounds a build (the patch's application and the build
	// command together); default DefaultTimeout.
	Timeout time.Duration
	// Memory bounds each build process's address space; default
	// DefaultMemory.
	Memory int64
	// GoRoot is the Go toolchain a SourceGo build uses, bound read-only;
	// default the GOROOT of the go command in PATH.
	GoRoot string
}

// Built is a patched engine in the cache.
type Built struct {
	// Digest is the content address: the source tree's files, the
	// patch, the source's kind, build command and install folder.
	Digest string `json:"digest"`
	// Dir is the engine's folder, Builder.Dir/Digest; read-only to an
	// engine's sandbox.
	Dir string `json:"-"`
	// Engine is what a command template's {{.Engine}} names: the built
	// program (Dir/bin/NAME, NAME the source folder's name) when the source has a build command, else the
	// Python overlay folder (Dir/site).
	Engine string `json:"-"`
	// PythonPath is, for a Python source, the overlay folder to put first
	// on the engine's PYTHONPATH; empty otherwise.
	PythonPath string `json:"-"`
	// PatchSHA256 is the patch's digest.
	PatchSHA256 string `json:"patch_sha256"`
	// EngineSHA256 is the built program's digest (empty for an overlay
	// without a build).
	EngineSHA256 string `json:"engine_sha256,omitempty"`
	// Revision is the source's pinned revision, for people.
	Revision string `json:"revision"`
	// Reused reports that the cache held it: nothing was built.
	Reused bool `json:"-"`
}

// Build returns the engine of src's tree (the folder tree, the campaign's
// pinned source) with patch applied, from the cache or built now. A patch
// that does not apply or a build that fails is an *engine.Failure with
// reason engine_build_failed; a build past the time limit one with
// engine_build_timeout; both carry the log's tail. A sandbox that cannot
// run here is one with engine_sandbox_unavailable.
func (b *Builder) Build(ctx context.Context, src campaign.EngineSource, tree string, patch []byte) (Built, error) {
	if src.Kind != campaign.SourceGo && src.Kind != campaign.SourcePython {
		return Built{}, &engine.Failure{Reason: reason.EngineBuildFailed, Message: fmt.Sprintf("the campaign's engine source has kind %q; the runner builds %q and %q", src.Kind, campaign.SourceGo, campaign.SourcePython)}
	}
	if src.Kind == campaign.SourceGo && src.Build == "" {
		return Built{}, &engine.Failure{Reason: reason.EngineBuildFailed, Message: "the campaign's Go engine source has no build command"}
	}
	if src.Kind == campaign.SourcePython && src.InstallDir == "" {
		return Built{}, &engine.Failure{Reason: reason.EngineBuildFailed, Message: "the campaign's Python engine source names no install_dir to lay the patched files over"}
	}
	digest, err := Digest(src, tree, patch)
	if err != nil {
		return Built{}, err
	}
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return Built{}, fmt.Errorf("enginebuild: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(b.Dir, digest+".lock"))
	if err != nil {
		return Built{}, err
	}
	defer unlock()
	dir := filepath.Join(b.Dir, digest)
	if built, err := readBuilt(dir, src); err == nil {
		built.Reused = true
		return built, nil
	}
	if err := b.Box.Check(ctx); err != nil {
		return Built{}, &engine.Failure{Reason: reason.EngineSandboxUnavailable, Message: fmt.Sprintf("the patched engine must be built sandboxed and cannot: %v", err)}
	}
	tmp, err := os.MkdirTemp(b.Dir, digest+".build-")
	if err != nil {
		return Built{}, fmt.Errorf("enginebuild: %w", err)
	}
	defer os.RemoveAll(tmp)
	built, err := b.build(ctx, src, tree, patch, tmp)
	if err != nil {
		return Built{}, err
	}
	built.Digest, built.Revision = digest, src.Revision
	sum := sha256.Sum256(patch)
	built.PatchSHA256 = hex.EncodeToString(sum[:])
	final := filepath.Join(tmp, "final")
	data, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		return Built{}, fmt.Errorf("enginebuild: %w", err)
	}
	// The manifest goes in last, and the folder is renamed into place
	// whole: a folder under its digest is always a complete build.
	if err := os.WriteFile(filepath.Join(final, manifestFile), append(data, '\n'), 0o644); err != nil {
		return Built{}, fmt.Errorf("enginebuild: %w", err)
	}
	_ = os.RemoveAll(dir) // an incomplete folder a killed runner left
	if err := os.Rename(final, dir); err != nil {
		return Built{}, fmt.Errorf("enginebuild: %w", err)
	}
	return readBuilt(dir, src)
}

// build applies patch to a copy of tree and builds it in tmp; the engine
// is left in tmp/final.
func (b *Builder) build(ctx context.Context, src campaign.EngineSource, tree string, patch []byte, tmp string) (Built, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout())
	defer cancel()
	work, final := filepath.Join(tmp, "src"), filepath.Join(tmp, "final")
	if err := copyTree(tree, work); err != nil {
		return Built{}, fmt.Errorf("enginebuild: copy the engine source: %w", err)
	}
	if err := os.MkdirAll(final, 0o755); err != nil {
		return Built{}, fmt.Errorf("enginebuild: %w", err)
	}
	if err := b.applier().Apply(ctx, work, patch); err != nil {
		if ctx.Err() != nil {
			return Built{}, b.timedOut(ctx, "applying the patch", err.Error())
		}
		f := engine.AsFailure(err)
		tail := err.Error()
		if f != nil {
			tail = f.LogTail
		}
		return Built{}, &engine.Failure{Reason: reason.EngineBuildFailed, LogTail: tail,
			Message: fmt.Sprintf("the patch does not apply to the campaign's engine source (%s): %s", src.Revision, lastLines(tail, 6))}
	}
	var built Built
	out := filepath.Join(final, BinDir, programName(src))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return Built{}, fmt.Errorf("enginebuild: %w", err)
	}
	dir := work
	if src.Kind == campaign.SourcePython {
		site := filepath.Join(final, SiteDir)
		pkg := filepath.Join(site, filepath.Base(filepath.Clean(src.InstallDir)))
		if err := overlay(src.InstallDir, tree, work, pkg); err != nil {
			return Built{}, fmt.Errorf("enginebuild: the Python overlay: %w", err)
		}
		built.Engine, built.PythonPath = site, site
		out, dir = site, pkg
	}
	if src.Build == "" {
		return built, nil
	}
	log, err := b.run(ctx, src, tmp, dir, out)
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Built{}, b.timedOut(ctx, "building", log)
	case ctx.Err() != nil:
		return Built{}, ctx.Err()
	case err != nil:
		return Built{}, &engine.Failure{Reason: reason.EngineBuildFailed, LogTail: lastLines(log, tailLines), Exit: err.Error(),
			Message: fmt.Sprintf("the patched engine's build (%s) failed (%v); build log tail: %s", src.Build, err, oneLine(lastLines(log, tailLines)))}
	}
	if src.Kind == campaign.SourceGo {
		sum, err := fileSHA256(out)
		if err != nil {
			return Built{}, &engine.Failure{Reason: reason.EngineBuildFailed, LogTail: lastLines(log, tailLines),
				Message: fmt.Sprintf("the patched engine's build (%s) succeeded but wrote no engine at {{.Out}}: %v", src.Build, err)}
		}
		built.Engine, built.EngineSHA256 = out, sum
	}
	return built, nil
}

// timedOut is the failure of a build stopped by its time limit.
func (b *Builder) timedOut(_ context.Context, what, log string) error {
	return &engine.Failure{Reason: reason.EngineBuildTimeout, LogTail: lastLines(log, tailLines),
		Message: fmt.Sprintf("the patched engine's build was stopped after %v while %s; build log tail: %s", b.timeout(), what, oneLine(lastLines(log, tailLines)))}
}

// run runs src's build command in dir inside the sandbox, with only tmp
// writable, and returns its log.
func (b *Builder) run(ctx context.Context, src campaign.EngineSource, tmp, dir, out string) (string, error) {
	cmdline, err := renderBuild(src.Build, out)
	if err != nil {
		return "", err
	}
	box := b.Box
	box.Writable = []string{tmp}
	box.Memory = b.memory()
	home := filepath.Join(tmp, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return "", fmt.Errorf("enginebuild: %w", err)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + box.TempDir(), "LANG=C.UTF-8"}
	if src.Kind == campaign.SourceGo {
		goroot, err := b.goRoot()
		if err != nil {
			return "", err
		}
		system := box.System
		if system == nil {
			system = engine.DefaultSystem
		}
		if !underAny(goroot, append(append([]string(nil), system...), box.Extra...)...) {
			box.Extra = append(append([]string(nil), box.Extra...), goroot)
		}
		// Offline, from the vendored tree, with the image's toolchain
		// and a fresh cache of this build's own: a build cache shared
		// between participants' builds is one a hostile build could
		// poison for the next.
		env = append(env, "PATH="+filepath.Join(goroot, "bin")+":/usr/local/bin:/usr/bin:/bin", "GOROOT="+goroot,
			"GOCACHE="+filepath.Join(tmp, "gocache"), "GOPATH="+filepath.Join(tmp, "gopath"), "GOMODCACHE="+filepath.Join(tmp, "gopath", "mod"),
			"GOFLAGS=-mod=vendor", "GOPROXY=off", "GOSUMDB=off", "GONOSUMCHECK=1", "GOTOOLCHAIN=local", "GOTELEMETRY=off", "CGO_ENABLED=0")
	}
	cmd, err := box.Command([]string{"/bin/sh", "-c", cmdline}, dir, nil)
	if err != nil {
		return "", &engine.Failure{Reason: reason.EngineSandboxUnavailable, Message: fmt.Sprintf("the build's sandbox: %v", err)}
	}
	cmd.Env = dedupEnv(env)
	var log tail
	cmd.Stdout, cmd.Stderr = &log, &log
	err = runBoxed(ctx, cmd)
	return log.String(), err
}

// runBoxed runs a sandbox's command until it exits or ctx ends. The
// command leads its own process group, killed whole when ctx ends;
// bubblewrap's --die-with-parent and Pdeathsig end it with a killed
// runner.
func runBoxed(ctx context.Context, cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	// Pdeathsig fires when the thread that started bubblewrap ends: keep
	// this goroutine on it until the command has exited.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("the sandbox did not start: %w", err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return err
}

func (b *Builder) applier() Applier {
	if b.Applier != nil {
		return b.Applier
	}
	return &PatchCommand{Box: b.Box}
}

func (b *Builder) timeout() time.Duration {
	if b.Timeout > 0 {
		return b.Timeout
	}
	return DefaultTimeout
}

func (b *Builder) memory() int64 {
	if b.Memory > 0 {
		return b.Memory
	}
	return DefaultMemory
}

// renderBuild fills the build command's {{.Out}}, shell-quoted.
func renderBuild(build, out string) (string, error) {
	t, err := template.New("build").Option("missingkey=error").Parse(build)
	if err != nil {
		return "", &engine.Failure{Reason: reason.EngineBuildFailed, Message: fmt.Sprintf("the campaign's build command does not parse: %v", err)}
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, struct{ Out string }{shellQuote(out)}); err != nil {
		return "", &engine.Failure{Reason: reason.EngineBuildFailed, Message: fmt.Sprintf("the campaign's build command names an unknown placeholder (only {{.Out}}): %v", err)}
	}
	return buf.String(), nil
}

// shellQuote quotes s for sh when it holds anything but plain path
// characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// goRoot is the toolchain's root: b.GoRoot, or the go command's.
func (b *Builder) goRoot() (string, error) {
	if b.GoRoot != "" {
		return b.GoRoot, nil
	}
	goBin, err := lookGo()
	if err != nil {
		return "", &engine.Failure{Reason: reason.EngineBuildFailed, Message: fmt.Sprintf("the runner's image has no Go toolchain to build a Go engine with: %v", err)}
	}
	return filepath.Dir(filepath.Dir(goBin)), nil
}

// Digest is the content address of src's tree with patch applied and
// built: SHA-256 over the source's kind, build command and install
// folder, every file of tree (its path, whether it is executable, its
// content; a link's target) in path order, and the patch.
func Digest(src campaign.EngineSource, tree string, patch []byte) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "lowbarena-engine-v1\x00%s\x00%s\x00%s\x00", src.Kind, src.Build, src.InstallDir)
	var paths []string
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("enginebuild: the engine source %s: %w", tree, err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(tree, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return "", fmt.Errorf("enginebuild: %w", err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return "", fmt.Errorf("enginebuild: %w", err)
			}
			fmt.Fprintf(h, "L\x00%s\x00%s\x00", rel, target)
		case fi.Mode().IsRegular():
			sum, err := fileSHA256(p)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "F\x00%s\x00%t\x00%s\x00", rel, fi.Mode()&0o111 != 0, sum)
		}
	}
	ps := sha256.Sum256(patch)
	fmt.Fprintf(h, "P\x00%x", ps)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// readBuilt reads the complete build in dir.
func readBuilt(dir string, src campaign.EngineSource) (Built, error) {
	data, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return Built{}, fmt.Errorf("enginebuild: %w", err)
	}
	var built Built
	if err := json.Unmarshal(data, &built); err != nil {
		return Built{}, fmt.Errorf("enginebuild: %s: %w", manifestFile, err)
	}
	built.Dir = dir
	if src.Kind == campaign.SourcePython {
		built.PythonPath = filepath.Join(dir, SiteDir)
		built.Engine = built.PythonPath
	}
	if src.Build != "" && src.Kind == campaign.SourceGo {
		built.Engine = filepath.Join(dir, BinDir, programName(src))
	}
	return built, nil
}

// programName is the built program's name: the source folder's, or
// "engine".
func programName(src campaign.EngineSource) string {
	name := filepath.Base(filepath.Clean("/" + src.Dir))
	if name == "/" || name == "." {
		return "engine"
	}
	return name
}

// lock takes the exclusive lock of path (created if need be), polling
// until it is free or ctx ends; the returned function releases it.
func lock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("enginebuild: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("enginebuild: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("enginebuild: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("enginebuild: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// tail keeps the last logBytes written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > logBytes {
		t.b = append([]byte(nil), t.b[len(t.b)-logBytes:]...)
	}
	return len(p), nil
}

func (t *tail) String() string { return string(t.b) }

// lastLines is s's last n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// oneLine joins s's words with single spaces, its last 2,000 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	if s == "" {
		return "none"
	}
	return s
}

// dedupEnv keeps the last entry of each name, in first-seen order.
func dedupEnv(env []string) []string {
	index := map[string]int{}
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if i, ok := index[name]; ok {
			out[i] = kv
			continue
		}
		index[name] = len(out)
		out = append(out, kv)
	}
	return out
}

// underAny reports whether p is one of dirs or below one.
func underAny(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}
