// Package sandboxtest helps tests of code that grades in the code
// sandbox (adapters/sandbox) see a machine that cannot run it.
package sandboxtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// NoNamespaces is what bubblewrap says, and does, where the kernel
// refuses it user namespaces.
const NoNamespaces = `echo "bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces." >&2` + "\nexit 1\n"

// FailingBwrap puts first on PATH a bwrap that fails as bubblewrap does
// where the kernel refuses user namespaces (a GPU pod under NVIDIA's
// container toolkit, a node whose runtime ignores hostUsers: false). The
// test that calls it may not be parallel: it sets PATH.
func FailingBwrap(t *testing.T) {
	t.Helper()
	fake, err := os.MkdirTemp("", "fake-bwrap-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(fake) })
	require.NoError(t, os.Chmod(fake, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(fake, "bwrap"), []byte("#!/bin/sh\n"+NoNamespaces), 0o755))
	t.Setenv("PATH", fake+string(filepath.ListSeparator)+os.Getenv("PATH"))
}
