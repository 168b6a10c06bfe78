package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEngineCacheFolders: every start of one engine program (the
// campaign's template, whatever its budget) gets the same cache folder, so
// a budget replay finds what the measured run compiled; a patched engine
// gets a folder of its own, never the campaign engine's; the engine's
// environment points its caches there; without CacheDir nothing is set.
func TestEngineCacheFolders(t *testing.T) {
	r := &Runner{CacheDir: t.TempDir()}
	const tmpl = "vllm serve {{.Checkpoint}} --port {{.Port}} --kv-cache-memory-bytes {{.KVCacheBytes}}"
	measured := Launch{Run: "candidate", Command: tmpl, Checkpoint: "/w/ck"}
	replay := Launch{Run: "serve@1.02", Command: tmpl, Checkpoint: "/w/ck", GPUMemoryGiB: 20, CapGiB: 24, KVCacheBytes: 1 << 30}
	patched := measured
	patched.EnginePath, patched.EngineDir = "/w/engines/abc/bin/engine", "/w/engines/abc"
	other := Launch{Run: "candidate", Command: "sglang " + tmpl, Checkpoint: "/w/ck"}

	dir, env, err := r.engineCache(measured)
	require.NoError(t, err)
	require.DirExists(t, dir)
	require.Equal(t, r.CacheDir, filepath.Dir(dir))
	require.Contains(t, env, "XDG_CACHE_HOME="+dir)
	require.Contains(t, env, "FLASHINFER_WORKSPACE_BASE="+dir, "FlashInfer's cache is under its own base, not XDG_CACHE_HOME")
	require.Contains(t, env, "TRITON_CACHE_DIR="+filepath.Join(dir, "triton"))
	require.Contains(t, env, "TORCHINDUCTOR_CACHE_DIR="+filepath.Join(dir, "torchinductor"))

	again, _, err := r.engineCache(replay)
	require.NoError(t, err)
	require.Equal(t, dir, again, "a budget replay of the same engine finds its caches")
	own, _, err := r.engineCache(patched)
	require.NoError(t, err)
	require.NotEqual(t, dir, own, "a patched engine writes only into its own")
	diff, _, err := r.engineCache(other)
	require.NoError(t, err)
	require.NotEqual(t, dir, diff)

	// The engine's environment, unsandboxed, carries them.
	_, envOf, err := r.box(measured)
	require.NoError(t, err)
	require.Contains(t, envOf, "XDG_CACHE_HOME="+dir)

	none := &Runner{}
	d, e, err := none.engineCache(measured)
	require.NoError(t, err)
	require.Empty(t, d)
	require.Empty(t, e)
	entries, err := os.ReadDir(r.CacheDir)
	require.NoError(t, err)
	require.Len(t, entries, 3)
	for _, en := range entries {
		require.True(t, en.IsDir() && len(en.Name()) == 16 && strings.Trim(en.Name(), "0123456789abcdef") == "", en.Name())
	}

	// A folder no start used for CacheMaxAge goes at the next start; one
	// in use stays.
	old := time.Now().Add(-CacheMaxAge - time.Hour)
	require.NoError(t, os.Chtimes(own, old, old))
	require.NoError(t, os.Chtimes(dir, old, old))
	_, _, err = r.engineCache(measured)
	require.NoError(t, err)
	require.NoDirExists(t, own)
	require.DirExists(t, dir, "used again by this start")
}
