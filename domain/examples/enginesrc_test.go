package examples_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/examples/internal/enginetree"
)

// TestEngineSourceIsSimengine holds the embedded tree equal to the files
// the repository builds simengine from. The reason codes (events/reason)
// are exempt: they change with every new code and do not change how the
// engine serves; TestEngineSourceBuildsOffline shows the tree still
// builds with the pinned ones.
func TestEngineSourceIsSimengine(t *testing.T) {
	want, err := enginetree.Collect(filepath.Join("..", ".."))
	require.NoError(t, err)
	got, err := examples.EngineSourceFiles()
	require.NoError(t, err)
	index := func(fs []examples.SourceFile) map[string]string {
		m := map[string]string{}
		for _, f := range fs {
			if !strings.HasPrefix(f.Path, "events/reason/") {
				m[f.Path] = string(f.Data)
			}
		}
		return m
	}
	w, g := index(want), index(got)
	for p := range w {
		require.Contains(t, g, p, "the pinned tree lacks %s: run `go generate ./domain/examples`", p)
		require.Equal(t, w[p], g[p], "the pinned tree's %s differs from the repository's: run `go generate ./domain/examples`", p)
	}
	for p := range g {
		require.Contains(t, w, p, "the pinned tree holds %s, which simengine no longer builds from: run `go generate ./domain/examples`", p)
	}
}

// TestEngineSourceArchiveRoundTrips: Format and Parse are inverse, and
// Format refuses content that would read as a file marker.
func TestEngineSourceArchiveRoundTrips(t *testing.T) {
	files := []enginetree.File{{Path: "a/b.go", Data: []byte("package b\n")}, {Path: "go.mod", Data: []byte("module m\n")}}
	data, err := enginetree.Format(files)
	require.NoError(t, err)
	back, err := enginetree.Parse(data)
	require.NoError(t, err)
	require.Equal(t, files, back)
	for _, tc := range []struct {
		name  string
		files []enginetree.File
	}{
		{"marker line", []enginetree.File{{Path: "x.go", Data: []byte("-- y.go --\n")}}},
		{"no final newline", []enginetree.File{{Path: "x.go", Data: []byte("package x")}}},
	} {
		_, err := enginetree.Format(tc.files)
		require.Error(t, err, tc.name)
	}
	_, err = enginetree.Parse([]byte("-- ../escape --\nx\n"))
	require.Error(t, err)
}

// offlineEnv is a go command environment with no network, no module
// cache and no workspace.
func offlineEnv(t *testing.T) []string {
	empty := t.TempDir()
	return append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=vendor", "GOWORK=off", "GOTOOLCHAIN=local",
		"GOMODCACHE="+filepath.Join(empty, "mod"), "GOPATH="+filepath.Join(empty, "path"))
}

// TestEngineSourceBuildsOffline writes the pinned tree, builds it with the
// campaign's build command offline, and runs the engine's --help; the
// digest it returns is the tree's on disk and the arena's bundle digest of
// those files.
func TestEngineSourceBuildsOffline(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "engine-src")
	digest, err := examples.WriteEngineSource(dir)
	require.NoError(t, err)
	onDisk, err := examples.ReadSourceTree(dir)
	require.NoError(t, err)
	require.Equal(t, digest, examples.SourceDigest(onDisk), "the platform's artifact test holds SourceDigest to the bundle digest")

	out := filepath.Join(t.TempDir(), "simengine")
	args := strings.Fields(strings.ReplaceAll(examples.EngineBuild, "{{.Out}}", out))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env = dir, offlineEnv(t)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "offline build:\n%s", b)
	help, _ := exec.Command(out, "--help").CombinedOutput()
	require.Contains(t, string(help), "Usage of simengine")
	require.Contains(t, string(help), "-checkpoint")
}

// TestEnginePatchesApply: every example patch is a git diff that applies
// to the pinned tree with no fuzz (git apply and patch both), touches
// only the campaign's allowed paths and stays under its size limit.
func TestEnginePatchesApply(t *testing.T) {
	patches, err := examples.EnginePatches()
	require.NoError(t, err)
	require.Len(t, patches, 8)
	honest := 0
	for _, p := range patches {
		t.Run(p.Name, func(t *testing.T) {
			if p.Honest {
				honest++
				require.Empty(t, p.Audit)
			} else {
				require.NotEmpty(t, p.Audit)
			}
			require.LessOrEqual(t, len(p.Diff), examples.MaxEnginePatchBytes)
			files := 0
			for line := range strings.Lines(string(p.Diff)) {
				name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "+++ b/")
				if !ok {
					continue
				}
				files++
				allowed := false
				for _, g := range examples.EngineAllow {
					if m, _ := path.Match(g, name); m {
						allowed = true
					}
				}
				require.True(t, allowed, "%s touches %s", p.Name, name)
			}
			require.Positive(t, files)
			dir := filepath.Join(t.TempDir(), "src")
			_, err := examples.WriteEngineSource(dir)
			require.NoError(t, err)
			for _, argv := range [][]string{{"git", "apply", "--check", "-"}, {"patch", "-p1", "--fuzz=0", "--dry-run", "--quiet"}} {
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Dir, cmd.Stdin = dir, bytes.NewReader(p.Diff)
				b, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s: %s", strings.Join(argv, " "), b)
			}
		})
	}
	require.Equal(t, 1, honest)
}

// TestExampleCampaignPinsEngineSource: the example campaign's engine names
// the tree it ships, by its digest, and each cheating bundle's engine
// patch carries its real diff.
func TestExampleCampaignPinsEngineSource(t *testing.T) {
	dir, exs := written(t)
	camp := filepath.Join(dir, examples.CampaignsDir, examples.TaskID)
	c, err := campaign.Load(camp)
	require.NoError(t, err)
	var meta struct {
		Engine campaign.EngineSpec `json:"engine"`
	}
	raw, err := os.ReadFile(filepath.Join(camp, campaign.File))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &meta))
	require.NotNil(t, c)
	src := meta.Engine.Source
	require.NotNil(t, src)
	require.Equal(t, campaign.SourceGo, src.Kind)
	require.Equal(t, examples.EngineSourceDir, src.Dir)
	tree, err := examples.ReadSourceTree(filepath.Join(camp, src.Dir))
	require.NoError(t, err)
	require.Equal(t, "simengine "+examples.SourceDigest(tree), src.Revision)
	require.Contains(t, src.Build, "{{.Out}}")
	require.Equal(t, examples.EngineAllow, src.Allow)
	require.EqualValues(t, examples.MaxEnginePatchBytes, src.MaxPatchBytes)

	patches, err := examples.EnginePatches()
	require.NoError(t, err)
	byName := map[string]examples.EnginePatch{}
	for _, p := range patches {
		byName[p.Name] = p
	}
	for _, ex := range exs {
		if ex.Patch == "" {
			continue
		}
		p, ok := byName[ex.Patch]
		require.True(t, ok, "%s names the patch %s", ex.Name, ex.Patch)
		b, err := os.ReadFile(filepath.Join(ex.Dir, examples.PatchFile))
		require.NoError(t, err)
		require.Equal(t, string(p.Diff), string(b), "%s carries exactly the diff of %s", ex.Name, ex.Patch)
		require.Equal(t, p.Audit, ex.Audit, "%s must be caught by its patch's audit", ex.Name)
	}
}
