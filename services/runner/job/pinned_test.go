package job_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
)

// The example campaign's pinned simengine source, unpatched and with each
// example patch, built offline once per test binary: the engines whose
// behaviour the audits judge, each from its own code.

var (
	pinnedOnce sync.Once
	pinnedBins map[string]string // patch name, or "" for the unpatched tree
	pinnedErr  error
)

// pinnedEngine returns the binary of the pinned tree with the example
// patch named patch applied ("" for none), building every one the first
// time it is asked.
func pinnedEngine(t *testing.T, patch string) string {
	t.Helper()
	pinnedOnce.Do(func() { pinnedBins, pinnedErr = buildPinned() })
	require.NoError(t, pinnedErr)
	bin, ok := pinnedBins[patch]
	require.True(t, ok, "no example patch %q", patch)
	return bin
}

// pinnedCommand is the command template of a pinned engine, sized as
// command sizes the repository's simengine.
func pinnedCommand(bin, extra string) string {
	return strings.Replace(command(extra), simengine, bin, 1)
}

// buildPinned writes the pinned tree once per patch, applies the patch
// with `patch -p1 --fuzz=0`, and builds the tree with the campaign's
// build command offline (the vendored modules, no proxy, no workspace),
// two at a time.
func buildPinned() (map[string]string, error) {
	dir, err := os.MkdirTemp("", "simengine-pinned-")
	if err != nil {
		return nil, fmt.Errorf("pinned engines: %w", err)
	}
	patches, err := examples.EnginePatches()
	if err != nil {
		return nil, fmt.Errorf("pinned engines: %w", err)
	}
	diffs := map[string][]byte{"": nil}
	for _, p := range patches {
		diffs[p.Name] = p.Diff
	}
	empty := filepath.Join(dir, "empty")
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=vendor", "GOWORK=off", "GOTOOLCHAIN=local",
		"GOMODCACHE="+filepath.Join(empty, "mod"), "GOPATH="+filepath.Join(empty, "path"))
	bins := map[string]string{}
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for name, diff := range diffs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			label := name
			if label == "" {
				label = "unpatched"
			}
			bin := filepath.Join(dir, "bin", label)
			err := buildOne(filepath.Join(dir, label), bin, diff, env)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("pinned engine %s: %w", label, err))
				return
			}
			bins[name] = bin
		})
	}
	wg.Wait()
	return bins, errors.Join(errs...)
}

// buildOne writes the pinned tree into src, applies diff (none when nil)
// and builds the engine into bin.
func buildOne(src, bin string, diff []byte, env []string) error {
	if _, err := examples.WriteEngineSource(src); err != nil {
		return err
	}
	if diff != nil {
		cmd := exec.Command("patch", "-p1", "--fuzz=0", "--quiet")
		cmd.Dir, cmd.Stdin = src, bytes.NewReader(diff)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("applying: %w: %s", err, b)
		}
	}
	args := strings.Fields(strings.ReplaceAll(examples.EngineBuild, "{{.Out}}", bin))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env = src, env
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building: %w: %s", err, b)
	}
	return nil
}
