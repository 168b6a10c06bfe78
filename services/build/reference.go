package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/lowbarena/lowbarena/adapters/hub"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/build/unpack"
)

// MaxSmallFileBytes bounds each file of a checkpoint by reference that the
// build fetches whole (config, index, tokenizer files): the index's own
// limit, and several times the largest tokenizer.json of the campaign
// families.
const MaxSmallFileBytes = 64 << 20

// reference completes an unpacked bundle that holds checkpoint.json: it
// checks the reference against the bundle, the submission and the
// operator's hosts, resolves the revision to the commit it is now (the
// hub's X-Repo-Commit), fetches every listed file other than the shards
// into dir at that commit (each checked against its declared size and
// sha256; never a shard), and returns the bundle's files with the listed
// ones added (the shards as their declarations) and the reference's
// summary, its Commit the commit. A revision that was not that commit
// already is pinned in the bundle: the checkpoint.json stored with it
// names the commit as its revision, so the contract stage and the runner,
// whatever the branch does meanwhile, read the files the build read. A
// bundle without checkpoint.json is returned as it is.
//
// Every refusal is an *unpack.Error: a bundle code, or the hub's
// reference_* code of the file that failed. A repository that
// rate-limits the build for longer than the client waits in place is a
// *stage.Wait of that long: the input is retried then, not refused.
func (b *Builder) reference(ctx context.Context, dir string, files []events.FileDigest, in events.SubmissionReceivedData) ([]events.FileDigest, *events.CheckpointReference, error) {
	i := fileIndex(files, bundle.CheckpointFile)
	if i < 0 {
		if in.Reference != nil {
			return nil, nil, refuse(reason.BundleDeclarationMismatch, "the submission names a checkpoint by reference at %s, but the bundle holds no %s; submit the bundle again with arena submit", in.Reference.Repository, bundle.CheckpointFile)
		}
		return files, nil, nil
	}
	data, err := os.ReadFile(filepath.Join(dir, bundle.CheckpointFile))
	if err != nil {
		return nil, nil, fmt.Errorf("build: %w", err)
	}
	ref, err := bundle.ParseReference(data)
	if err != nil {
		var be *bundle.Error
		if errors.As(err, &be) {
			return nil, nil, refuse(be.Code, "%s", be.Message)
		}
		return nil, nil, err
	}
	repo, err := ref.Repo()
	if err != nil {
		return nil, nil, hubRefusal(err)
	}
	sum := &events.CheckpointReference{Repository: repo.Base.String(), Revision: ref.Revision, Files: len(ref.Files), Bytes: ref.Bytes()}
	if announced := in.Reference; announced != nil && (record.Reference{Repository: announced.Repository, Revision: announced.Revision, Files: announced.Files, Bytes: announced.Bytes}) != *sum {
		return nil, nil, refuse(reason.BundleDeclarationMismatch, "the submission names %s@%s (%d files, %d bytes) and the bundle's %s %s@%s (%d files, %d bytes); submit the bundle again with arena submit",
			in.Reference.Repository, in.Reference.Revision, in.Reference.Files, in.Reference.Bytes, bundle.CheckpointFile, sum.Repository, sum.Revision, sum.Files, sum.Bytes)
	}
	if err := b.hub().Allowed(repo); err != nil {
		return nil, nil, hubRefusal(err)
	}
	if err := b.fits(files, ref); err != nil {
		return nil, nil, err
	}
	// One commit for the whole pipeline: the revision as it is now.
	if cfg, ok := ref.File("config.json"); ok {
		if repo, err = b.hub().Resolve(ctx, repo, cfg.Hub()); err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, hubRefusal(err)
		}
	}
	if modelrepo.IsCommit(repo.Revision) {
		sum.Commit = repo.Revision
	}

	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("build: %w", err)
	}
	defer root.Close()
	out := append([]events.FileDigest(nil), files...)
	for _, f := range ref.Files {
		out = append(out, events.FileDigest{Path: f.Path, Size: f.Size, SHA256: f.SHA256})
		if bundle.Remote(f.Path) {
			continue // a shard stays in the repository
		}
		data, err := b.hub().Fetch(ctx, repo, f.Hub(), MaxSmallFileBytes)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, hubRefusal(err)
		}
		if d := path.Dir(f.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return nil, nil, fmt.Errorf("build: %w", err)
			}
		}
		if err := root.WriteFile(f.Path, data, 0o644); err != nil {
			return nil, nil, fmt.Errorf("build: %w", err)
		}
	}
	if sum.Commit != "" && sum.Commit != ref.Revision {
		if out, err = pin(dir, out, *ref, sum.Commit); err != nil {
			return nil, nil, err
		}
	}
	return out, sum, nil
}

// pin rewrites dir's checkpoint.json with commit as its revision and
// returns files with its new size and digest.
func pin(dir string, files []events.FileDigest, ref bundle.Reference, commit string) ([]events.FileDigest, error) {
	ref.Revision = commit
	if err := bundle.WriteReference(dir, ref); err != nil {
		return nil, fmt.Errorf("build: pin %s: %w", bundle.CheckpointFile, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, bundle.CheckpointFile))
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	d := sha256.Sum256(data)
	i := fileIndex(files, bundle.CheckpointFile)
	files[i].Size, files[i].SHA256 = int64(len(data)), hex.EncodeToString(d[:])
	return files, nil
}

// fits checks a reference against the bundle that carries it and the
// build's limits: no shard in the bundle, no file both in the bundle and
// listed, and the listed files within the bundle limits.
func (b *Builder) fits(files []events.FileDigest, ref *bundle.Reference) error {
	lim := b.Limits.WithDefaults()
	for _, f := range files {
		if bundle.Remote(f.Path) {
			return refuse(reason.BundleReferenceConflict, "%s is in the bundle, which also holds %s: a checkpoint by reference keeps its shards in its repository; list %s in %s, or submit the bundle without %s",
				f.Path, bundle.CheckpointFile, f.Path, bundle.CheckpointFile, bundle.CheckpointFile)
		}
		if _, listed := ref.File(f.Path); listed {
			return refuse(reason.BundleReferenceConflict, "%s is both in the bundle and listed in %s; keep one of the two", f.Path, bundle.CheckpointFile)
		}
	}
	if n := len(files) + len(ref.Files); n > lim.MaxFiles {
		return refuse(reason.BundleTooManyFiles, "the bundle and its %s hold %d files; the limit is %d", bundle.CheckpointFile, n, lim.MaxFiles)
	}
	if ref.Bytes() > lim.MaxBytes {
		return refuse(reason.BundleTooLarge, "%s lists %d bytes; the limit is %d", bundle.CheckpointFile, ref.Bytes(), lim.MaxBytes)
	}
	for _, f := range ref.Files {
		if f.Size > lim.MaxFileBytes {
			return refuse(reason.BundleFileTooLarge, "%s is declared %d bytes; one file may be at most %d (shard the checkpoint)", f.Path, f.Size, lim.MaxFileBytes)
		}
		if err := unpack.CheckName(f.Path, lim.MaxDepth); err != nil {
			return err
		}
		if err := unpack.CheckKind(f.Path); err != nil {
			return err
		}
	}
	return nil
}

// hub is the repository client; without one, no host is allowed and every
// reference is refused with reference_host_not_allowed.
func (b *Builder) hub() *hub.Client {
	if b.Hub == nil {
		return noHosts
	}
	return b.Hub
}

var noHosts = hub.New(hub.Options{})

// hubRefusal turns the hub's refusal into the build's; a rate limit
// longer than the client waits in place into a wait of the stage.
func hubRefusal(err error) error {
	if d, ok := modelrepo.Wait(err); ok {
		return stage.RetryAfter(d, err)
	}
	if he := modelrepo.AsError(err); he != nil {
		return &unpack.Error{Code: he.Code, Message: he.Message, Err: err}
	}
	return err
}

func refuse(code reason.Code, format string, args ...any) *unpack.Error {
	return &unpack.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func fileIndex(files []events.FileDigest, p string) int {
	for i, f := range files {
		if f.Path == p {
			return i
		}
	}
	return -1
}

// tooLarge is the refusal of an upload over the limit.
func tooLarge(size, limit int64) *unpack.Error {
	return refuse(reason.BundleUploadTooLarge,
		"the uploaded bundle is %s; this arena takes uploads of at most %s. Submit a checkpoint this large by reference: publish it in a model repository, list its files in %s beside submission.json (arena reference writes it), and submit that folder",
		human(size), human(limit), bundle.CheckpointFile)
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, i := float64(n), 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", v), "0"), ".") + " " + []string{"B", "KiB", "MiB", "GiB", "TiB"}[i]
}
