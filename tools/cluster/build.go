package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Services are the arena's service binaries, each from services/<name>/cmd/<name>,
// in the order the cluster starts them.
var Services = []string{"gateway", "build", "contract", "quality", "efficiency", "score", "round", "runner"}

// Binaries are the paths of what Build built.
type Binaries struct {
	// Dir holds them all; the runners find simengine there (PATH).
	Dir string
	// NATS is nats-server, built from the module the arena embeds
	// (github.com/nats-io/nats-server/v2, the version of go.mod).
	NATS string
	// Arena is the light CLI.
	Arena string
	// Service maps a service name to its binary.
	Service map[string]string
}

// Build builds, into dir, nats-server, every service binary from its own
// main package, simengine and the light arena CLI, as an operator would
// (`go build` in each folder; the runner with cgo for go-nvml). root is
// the repository's root.
func Build(ctx context.Context, root, dir string) (Binaries, error) {
	b := Binaries{Dir: dir, NATS: filepath.Join(dir, "nats-server"), Arena: filepath.Join(dir, "arena"), Service: map[string]string{}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return b, fmt.Errorf("cluster: %w", err)
	}
	type target struct{ folder, pkg, out string }
	targets := []target{
		{"tools/cluster", "github.com/nats-io/nats-server/v2", b.NATS},
		{"tools/arena", ".", b.Arena},
		{"tools/simengine", ".", filepath.Join(dir, "simengine")},
	}
	for _, s := range Services {
		b.Service[s] = filepath.Join(dir, s)
		targets = append(targets, target{"services/" + s, "./cmd/" + s, b.Service[s]})
	}
	for _, t := range targets {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", t.out, t.pkg)
		cmd.Dir = filepath.Join(root, t.folder)
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("cluster: go build %s in %s: %w\n%s", t.pkg, t.folder, err, strings.TrimSpace(string(out)))
		}
	}
	return b, nil
}
