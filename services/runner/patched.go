package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/enginepatch"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/services/runner/engine"
	"github.com/lowbarena/lowbarena/services/runner/enginebuild"
	"github.com/lowbarena/lowbarena/services/runner/job"
)

// EnginePatch is a candidate's patched engine as a job's params name it:
// the campaign's pinned engine source (Source, whose tree is Bundle in
// the artifact store) and the path of the candidate's diff inside its
// own bundle (Patch).
type EnginePatch struct {
	Source campaign.EngineSource
	Bundle *events.BundleRef
	Patch  string
	// EngineDigest is the patched tree's digest the build stage checked
	// ("" checks nothing).
	EngineDigest string
}

// enginePatchOf is the patched engine an engine job's params ask for:
// nil when they name no patch. A patch without the campaign's bundle or
// pinned source is the stage's error, and fails the job when it is built.
func enginePatchOf(spec events.EngineSpec, bundle *events.BundleRef, patch, digest string) *EnginePatch {
	if patch == "" {
		return nil
	}
	ep := &EnginePatch{Bundle: bundle, Patch: patch, EngineDigest: digest}
	if spec.Source != nil {
		ep.Source = *spec.Source
	}
	return ep
}

// patchedEngine fetches the source tree of a job's patched engine (with
// fetch, as the job's other bundles) and builds the engine (buildEngine),
// reporting the build as the job's progress. ok false ends the job with
// outcome: its failure (fail, with the build's log tail, and exit set to
// how the build ended), or a retry for a runner told to stop or a pod
// that could not build for reasons of its own.
func (s *Service) patchedEngine(ctx context.Context, jobID string, ep EnginePatch, checkpoint string,
	fetch func(events.BundleRef, string) (string, bus.Outcome, bool),
	fail func(reason.Code, string, string, float64) bus.Outcome,
	progress func(phase string, done, total int, unit string), exit *string,
) (patched job.Patched, outcome bus.Outcome, ok bool) {
	var tree string
	if ep.Bundle != nil {
		if tree, outcome, ok = fetch(*ep.Bundle, "the campaign's engine source"); !ok {
			return job.Patched{}, outcome, false
		}
	}
	progress(events.PhaseBuildingEngine, 0, 1, "")
	patched, built, err := s.buildEngine(ctx, ep, tree, checkpoint)
	switch f := engine.AsFailure(err); {
	case ctx.Err() != nil:
		s.log.Info("runner stopping; job handed back", "job", jobID)
		return job.Patched{}, bus.Retry(0, ctx.Err()), false
	case f != nil:
		*exit = f.Exit
		return job.Patched{}, fail(f.Reason, prefix(err, f.Message), f.LogTail, 0), false
	case err != nil:
		return job.Patched{}, bus.Retry(0, err), false
	}
	progress(events.PhaseBuildingEngine, 1, 1, "")
	s.log.Info("patched engine", "job", jobID, "engine", built.Digest, "reused", built.Reused, "revision", built.Revision,
		"patch_sha256", built.PatchSHA256, "engine_sha256", built.EngineSHA256)
	return patched, bus.Outcome{}, true
}

// maxPatchBytes bounds the patch the runner reads from a bundle: the
// build stage refused anything larger than the campaign allows, whose
// limit is far below it.
const maxPatchBytes = 16 << 20

// buildEngine builds the candidate's patched engine of a job: ep's patch,
// read from the candidate's folder checkpoint, applied to the engine
// source tree (ep.Bundle, fetched to tree), built once per pod (the
// runner's enginebuild.Builder, WORK/engines) and run sandboxed by the
// job (job.Patched). A job that names no source, a patch that cannot be
// read, does not apply, or whose build fails or runs past its limit is
// an *engine.Failure (engine_build_failed, engine_build_timeout,
// engine_sandbox_unavailable): the job fails with it. Any other error is
// the pod's (its disk) and worth a retry.
func (s *Service) buildEngine(ctx context.Context, ep EnginePatch, tree, checkpoint string) (job.Patched, enginebuild.Built, error) {
	failed := func(format string, args ...any) error {
		return &engine.Failure{Reason: reason.EngineBuildFailed, Message: fmt.Sprintf(format, args...)}
	}
	if ep.Bundle == nil || ep.Source.Kind == "" {
		return job.Patched{}, enginebuild.Built{}, failed("the job names the engine patch %s but not the campaign's pinned engine source (engine.source and its tree in the artifact store), so the patched engine cannot be built", ep.Patch)
	}
	patch, err := readPatch(checkpoint, ep.Patch)
	if err != nil {
		return job.Patched{}, enginebuild.Built{}, failed("the candidate's engine patch %s cannot be read from its bundle: %v", ep.Patch, err)
	}
	if ep.EngineDigest != "" {
		// Invariant: the runner builds and runs only the tree the build
		// stage checked and the record names. Checked here, before the
		// pod's cache, which is keyed by tree and patch and would
		// otherwise hand back an engine of another source.
		src, err := enginepatch.Open(&ep.Source, tree)
		if err != nil {
			return job.Patched{}, enginebuild.Built{}, failed("the campaign's engine source cannot be read: %v", err)
		}
		sum, err := src.Check(patch)
		if err != nil {
			return job.Patched{}, enginebuild.Built{}, failed("the candidate's engine patch %s: %v", ep.Patch, err)
		}
		if sum.EngineDigest != ep.EngineDigest {
			return job.Patched{}, enginebuild.Built{}, &engine.Failure{Reason: reason.EngineSourceChanged, Message: fmt.Sprintf(
				"the patch %s applied to the engine source this job names (revision %s, tree %s) gives the tree %s, not the %s the build stage checked and the record names: the campaign's engine source changed between the stages, and the submission is run on no other engine than its record's",
				ep.Patch, ep.Source.Revision, short(sum.SourceDigest), short(sum.EngineDigest), short(ep.EngineDigest))}
		}
	}
	b := s.builder
	b.Applier = exactApplier{source: ep.Source}
	built, err := b.Build(ctx, ep.Source, tree, patch)
	if err != nil {
		return job.Patched{}, enginebuild.Built{}, fmt.Errorf("the patched engine: %w", err)
	}
	return job.Patched{Path: built.Engine, Dir: built.Dir, PythonPath: built.PythonPath}, built, nil
}

// readPatch reads the file name of the bundle folder dir, within it.
func readPatch(dir, name string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPatchBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPatchBytes {
		return nil, fmt.Errorf("it is larger than %d bytes", maxPatchBytes)
	}
	return data, nil
}

// exactApplier is enginebuild's Applier over domain/enginepatch: the
// build stage's own applier, which checked the patch against the same
// source and rules (the paths a patch may touch, its size, no build
// scripts), applies it exactly here too, so the runner builds the tree
// whose digest the submission's record names.
type exactApplier struct {
	source campaign.EngineSource
}

// Apply applies patch to the tree in dir in place: the patched tree is
// written beside it and put in its place. A refused patch is an
// *enginepatch.Error.
func (a exactApplier) Apply(_ context.Context, dir string, patch []byte) error {
	src, err := enginepatch.Open(&a.source, dir)
	if err != nil {
		return err
	}
	patched := dir + ".patched"
	if _, err := src.Apply(patch, patched); err != nil {
		_ = os.RemoveAll(patched)
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	if err := os.Rename(patched, dir); err != nil {
		return fmt.Errorf("runner: %w", err)
	}
	return nil
}

// buildBox is the sandbox of the pod's engine builds: the engines' (its
// bubblewrap, helper and the image's extra paths) without the GPU's
// device nodes, which no build needs.
func buildBox(b engine.Box) engine.Box {
	return engine.Box{Bwrap: b.Bwrap, Helper: b.Helper, System: b.System, Extra: b.Extra}
}

// short is a digest's first 12 characters, as people read them.
func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}
