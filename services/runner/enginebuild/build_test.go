package enginebuild_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/enginebuild"
)

// TestMain lets the test binary be the sandbox's helper, as the runner's
// own binary is.
func TestMain(m *testing.M) {
	engine.RunHelper()
	os.Exit(m.Run())
}

// requireSandbox skips where bubblewrap cannot sandbox, unless
// LOWBARENA_REQUIRE_SANDBOX says this machine must.
func requireSandbox(t *testing.T) {
	t.Helper()
	err := (&engine.Box{}).Check(t.Context())
	if err == nil {
		return
	}
	if os.Getenv("LOWBARENA_REQUIRE_SANDBOX") != "" {
		t.Fatalf("LOWBARENA_REQUIRE_SANDBOX is set and the engine sandbox is unavailable: %v", err)
	}
	t.Skipf("engine sandbox unavailable: %v", err)
}

// tinySource is the campaign's pinned source of testdata/tiny, built as
// simengine's would be.
func tinySource() campaign.EngineSource {
	return campaign.EngineSource{Dir: "tiny", Revision: "tiny test engine", Kind: campaign.SourceGo,
		Build: "go build -trimpath -o {{.Out}} .", Allow: []string{"*.go"}, MaxPatchBytes: 1 << 20}
}

func readPatch(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// TestBuildOncePerPod builds one patched engine from two jobs at once and
// then from a third: one build, the others re-use it (the program is the
// same file, untouched), and a different patch is another engine.
func TestBuildOncePerPod(t *testing.T) {
	requireSandbox(t)
	b := &enginebuild.Builder{Dir: filepath.Join(t.TempDir(), "engines")}
	src, patch := tinySource(), readPatch(t, "hostile.patch")

	var wg sync.WaitGroup
	results := make([]enginebuild.Built, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Go(func() { results[i], errs[i] = b.Build(t.Context(), src, "testdata/tiny", patch) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NotEqual(t, results[0].Reused, results[1].Reused, "of two concurrent jobs exactly one builds")
	require.Equal(t, results[0].Engine, results[1].Engine)
	require.Equal(t, filepath.Join(b.Dir, results[0].Digest, "bin", "tiny"), results[0].Engine)
	require.Len(t, results[0].EngineSHA256, 64)
	require.Equal(t, results[0].EngineSHA256, results[1].EngineSHA256)

	before, err := os.Stat(results[0].Engine)
	require.NoError(t, err)
	again, err := b.Build(t.Context(), src, "testdata/tiny", patch)
	require.NoError(t, err)
	require.True(t, again.Reused)
	after, err := os.Stat(again.Engine)
	require.NoError(t, err)
	require.Equal(t, before.ModTime(), after.ModTime(), "a re-used engine is not rebuilt")
	entries, err := os.ReadDir(b.Dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.NotContains(t, e.Name(), ".build-", "no build folder is left behind")
	}

	other, err := enginebuild.Digest(src, "testdata/tiny", readPatch(t, "broken.patch"))
	require.NoError(t, err)
	require.NotEqual(t, results[0].Digest, other, "another patch is another engine")
}

// TestBuildFailures: a patch that breaks the build, one that does not
// apply and a build that hangs each end with their reason and the log's
// tail, the hang within its limit.
func TestBuildFailures(t *testing.T) {
	requireSandbox(t)
	stale := []byte("--- a/main.go\n+++ b/main.go\n@@ -1,3 +1,3 @@\n-// Command tiny is not what this line says.\n+// Command tiny is patched.\n // the smallest OpenAI-shaped engine the runner's tests\n // patch and build: it answers /health and /v1/completions on its port,\n")
	hang := tinySource()
	hang.Build = "echo building slowly; sleep 60"
	cases := []struct {
		name    string
		src     campaign.EngineSource
		patch   []byte
		timeout time.Duration
		reason  reason.Code
		tail    string
	}{
		{name: "compile error", src: tinySource(), patch: readPatch(t, "broken.patch"), reason: reason.EngineBuildFailed, tail: "undefinedAnswer"},
		{name: "patch does not apply", src: tinySource(), patch: stale, reason: reason.EngineBuildFailed, tail: "FAILED"},
		{name: "build hangs", src: hang, patch: readPatch(t, "hostile.patch"), timeout: 3 * time.Second, reason: reason.EngineBuildTimeout, tail: "building slowly"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &enginebuild.Builder{Dir: filepath.Join(t.TempDir(), "engines"), Timeout: c.timeout}
			t0 := time.Now()
			_, err := b.Build(t.Context(), c.src, "testdata/tiny", c.patch)
			f := engine.AsFailure(err)
			require.NotNil(t, f, "%v", err)
			require.Equal(t, c.reason, f.Reason, f.Message)
			require.Contains(t, f.LogTail, c.tail)
			if c.timeout > 0 {
				require.Less(t, time.Since(t0), c.timeout+5*time.Second, "a hung build is stopped at its limit")
			}
			entries, err := os.ReadDir(b.Dir)
			require.NoError(t, err)
			for _, e := range entries {
				require.True(t, strings.HasSuffix(e.Name(), ".lock"), "a failed build leaves nothing but its lock: %s", e.Name())
			}
		})
	}
}

// buildHostile builds testdata/hostile.patch over testdata/tiny.
func buildHostile(t *testing.T) enginebuild.Built {
	t.Helper()
	b := &enginebuild.Builder{Dir: filepath.Join(t.TempDir(), "engines")}
	built, err := b.Build(context.Background(), tinySource(), "testdata/tiny", readPatch(t, "hostile.patch"))
	require.NoError(t, err)
	return built
}
