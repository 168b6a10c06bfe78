package examples

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples/internal/enginetree"
	"github.com/lowbarena/lowbarena/events/reason"
)

// The example campaign pins simengine's own source as its engine source
// (campaign.EngineSource): the files that build tools/simengine, at their
// repository paths, with its one third-party module vendored, so that the
// tree builds offline with `go build ./tools/simengine` and a
// participant's patch is a patch against the repository's own paths.
//
// The tree is generated from the repository into enginesrc/simengine.txtar
// (a text archive, one "-- PATH --" line before each file) and embedded
// here, because domain/examples cannot embed files of tools/simengine,
// another module; TestEngineSourceIsSimengine holds the archive equal to
// what the repository builds simengine from.
//
//go:generate go run ./internal/enginetree/gen ../.. enginesrc/simengine.txtar
//go:embed enginesrc/simengine.txtar
var engineArchive []byte

// EngineSourceDir is the engine source tree's folder in the example
// campaign's folder.
const EngineSourceDir = "engine-src"

// EngineBuild is the example campaign's build command, run in the
// (patched) tree offline: vendor mode is the default with a vendor/
// folder, and -trimpath makes the engine's bytes independent of where the
// tree lies, so the same tree and patch build the same engine.
const EngineBuild = "go build -trimpath -o {{.Out}} ./" + enginetree.MainPackage

// EngineAllow is the paths a patch against the example tree may touch:
// simengine's own Go files, not the arena packages it imports (the answer
// key of the eval suite among them), nor go.mod or the vendored modules.
var EngineAllow = []string{enginetree.MainPackage + "/*.go"}

// MaxEnginePatchBytes bounds a patch against the example tree.
const MaxEnginePatchBytes = 256 << 10

// SourceFile is one file of the pinned tree: a slash path relative to the
// tree's root and its content.
type SourceFile = enginetree.File

// EngineSourceFiles returns the pinned tree's files, sorted by path.
func EngineSourceFiles() ([]SourceFile, error) {
	files, err := enginetree.Parse(engineArchive)
	if err != nil {
		return nil, fmt.Errorf("examples: the embedded engine source: %w", err)
	}
	return files, nil
}

// SourceDigest is a tree's content digest, the arena's bundle digest
// (platform/artifact's manifest): the sha256 of the lines
// "<sha256 hex> <size> <path>\n" of its files, sorted by path.
func SourceDigest(files []SourceFile) string {
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b SourceFile) int { return strings.Compare(a.Path, b.Path) })
	h := sha256.New()
	for _, f := range sorted {
		sum := sha256.Sum256(f.Data)
		fmt.Fprintf(h, "%s %d %s\n", hex.EncodeToString(sum[:]), len(f.Data), f.Path)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ReadSourceTree reads every regular file under dir as a tree, for
// SourceDigest; it refuses links and other special files.
func ReadSourceTree(dir string) ([]SourceFile, error) {
	var files []SourceFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, SourceFile{Path: filepath.ToSlash(rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("examples: reading source tree: %w", err)
	}
	return files, nil
}

// WriteEngineSource writes the pinned tree into dir, replacing dir, and
// returns the tree's digest.
func WriteEngineSource(dir string) (string, error) {
	files, err := EngineSourceFiles()
	if err != nil {
		return "", err
	}
	if err := resetDir(dir); err != nil {
		return "", err
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", fmt.Errorf("examples: %w", err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return "", fmt.Errorf("examples: %w", err)
		}
	}
	return SourceDigest(files), nil
}

// EngineSource is the example campaign's engine source block: the pinned
// tree in EngineSourceDir, its revision "simengine <digest>", built by
// EngineBuild, patches limited to EngineAllow and MaxEnginePatchBytes.
func EngineSource() (campaign.EngineSource, error) {
	files, err := EngineSourceFiles()
	if err != nil {
		return campaign.EngineSource{}, err
	}
	return campaign.EngineSource{
		Dir: EngineSourceDir, Revision: "simengine " + SourceDigest(files), Kind: campaign.SourceGo,
		Build: EngineBuild, Allow: slices.Clone(EngineAllow), MaxPatchBytes: MaxEnginePatchBytes,
	}, nil
}

// EnginePatch is one of the example patches against the pinned tree: a
// git-style unified diff (a/ and b/ prefixes, exact context) that applies
// with `patch -p1 --fuzz=0` and `git apply`.
type EnginePatch struct {
	// Name is the patch's name and file stem, e.g. "answer-cache".
	Name string
	// Honest reports whether the patch is a fair change the arena should
	// measure (true for one, "honest-batching").
	Honest bool
	// Audit is the reason code of the audit that must disqualify the
	// patched engine ("" for the honest one).
	Audit string
	// About says in one sentence what the patch changes.
	About string
	// Diff is the patch's text.
	Diff []byte
}

//go:embed patches/*.patch
var patchFiles embed.FS

// PatchesDir is the folder of the example patches in this package.
const PatchesDir = "patches"

// EnginePatches returns the example patches in a fixed order.
func EnginePatches() ([]EnginePatch, error) {
	var out []EnginePatch
	for _, p := range enginePatches {
		diff, err := patchFiles.ReadFile(path.Join(PatchesDir, p.Name+".patch"))
		if err != nil {
			return nil, fmt.Errorf("examples: patch %s: %w", p.Name, err)
		}
		if !bytes.HasPrefix(diff, []byte("diff --git a/")) {
			return nil, errors.New("examples: patch " + p.Name + " does not start with a git diff header")
		}
		p.Diff = diff
		out = append(out, p)
	}
	return out, nil
}

// FasterThanDevice is the reason code of the device audit, which stops a
// patch that rewrites the simulator's physics (the audit's own package
// defines it).
const FasterThanDevice = "faster_than_device"

// enginePatches are the example patches, in order, without their text.
var enginePatches = []EnginePatch{
	{Name: "async-scheduling", Honest: true,
		About: "Async scheduling: the scheduler prepares the next step while the device runs this one, so a step takes the longer of the device's time and the scheduler's overhead instead of their sum; the device's own time is unchanged, and the engine serves the same answers faster."},
	{Name: "answer-cache", Audit: string(reason.AnswerCacheSuspected),
		About: "Records every streamed completion and replays it at once when the same request comes again, so repeated prompts decode in no time."},
	{Name: "pad-tokens", Audit: string(reason.TokenCountDishonest),
		About: "A streamed request of ignore_eos (the measured load) generates half its tokens and streams each in two chunks, claiming every chunk as a token, so its measured throughput is padded."},
	{Name: "fast-path-under-load", Audit: string(reason.AccuracyDiffersUnderLoad),
		About: "Once four or more requests run, streamed requests take a fast path that answers worse and skips half the step overhead."},
	{Name: "other-model-for-load", Audit: string(reason.ServedModelMismatch),
		About: "Answers every streamed request, the measured load's and its probes', from another, smaller model while /v1/models names the checkpoint; the quality job's requests, not streamed, get the checkpoint."},
	{Name: "other-model-always", Audit: string(reason.ServedModelMismatch),
		About: "Answers every request, the quality job's included, from another, smaller model, so only a comparison with the unpatched pinned engine shows it."},
	{Name: "route-by-shape", Audit: string(reason.AccuracyDiffersUnderLoad),
		About: "Judges a prompt by its length and content: documents the length of the load's take a damaged fast path, short prompts and the suite's longer documents the honest one."},
	{Name: "shorter-waits", Audit: FasterThanDevice,
		About: "Waits a third of each step's simulated device time, so it decodes three times faster than the simulated device allows."},
}
