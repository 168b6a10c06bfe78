package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/domain/bundle"
)

// referenceKinds are the files of a checkpoint folder that `arena
// reference` lists: the weights in safetensors form, configs and indexes,
// and tokenizer files. Anything else (READMEs, licences, pickled weights,
// code) is skipped and named on stderr.
var referenceKinds = []string{".safetensors", ".json", ".txt", ".model", ".tiktoken", ".jinja"}

func cmdReference(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reference", stderr)
	repository := fs.String("repository", "", "the repository's https address, e.g. https://huggingface.co/ORG/NAME (no credentials)")
	revision := fs.String("revision", "", "the commit (best: it pins the files), branch or tag the files are read at")
	out := fs.String("out", "", "write checkpoint.json there (default: standard output)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 || *repository == "" || *revision == "" {
		return usageErr("reference takes the repository, its revision and at most a local copy of the checkpoint (arena reference [CHECKPOINT_DIR] --repository URL --revision COMMIT [--out FILE])")
	}
	var ref *bundle.Reference
	var skipped []string
	if len(pos) == 1 {
		ref, skipped, err = describe(ctx, pos[0], *repository, *revision, stderr)
	} else {
		ref, skipped, err = describeRemote(ctx, *repository, *revision, stderr)
	}
	if err != nil {
		return err
	}
	for _, s := range skipped {
		fmt.Fprintf(stderr, "  skipped %s (not part of what the arena reads)\n", s)
	}
	data, err := json.MarshalIndent(ref, "", "  ")
	if err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	data = append(data, '\n')
	if *out == "" {
		_, err = stdout.Write(data)
		return err
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %s: %d files, %s at %s@%s\n", *out, len(ref.Files), bundle.HumanSize(ref.Bytes()), *repository, *revision)
	return nil
}

// describe lists the checkpoint files at the top of dir with their sizes
// and sha256, as checkpoint.json declares them, and checks the result as
// the arena will.
func describe(ctx context.Context, dir, repository, revision string, progress io.Writer) (*bundle.Reference, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reference: %w", err)
	}
	ref := bundle.Reference{Repository: repository, Revision: revision}
	var skipped []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !referenced(name) {
			if !e.IsDir() && !strings.HasPrefix(name, ".") {
				skipped = append(skipped, name)
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		f, err := digestFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, err
		}
		f.Path = name
		if f.Size > 256<<20 {
			fmt.Fprintf(progress, "  %s: %s, sha256 %s\n", name, bundle.HumanSize(f.Size), short(f.SHA256))
		}
		ref.Files = append(ref.Files, f)
	}
	checked, err := checkReference(ref)
	if err != nil {
		return nil, nil, err
	}
	return checked, skipped, nil
}

// referenced reports whether a file at the top of a checkpoint, named
// name, is one checkpoint.json lists: of referenceKinds, not hidden, and
// neither the bundle's submission.json nor checkpoint.json itself.
func referenced(name string) bool {
	return !strings.HasPrefix(name, ".") && name != bundle.DeclarationFile && name != bundle.CheckpointFile &&
		slices.Contains(referenceKinds, strings.ToLower(filepath.Ext(name)))
}

// checkReference checks ref as the arena will (and sorts its files).
func checkReference(ref bundle.Reference) (*bundle.Reference, error) {
	data, err := json.Marshal(ref)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	return bundle.ParseReference(data)
}

func digestFile(path string) (bundle.ReferencedFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return bundle.ReferencedFile{}, fmt.Errorf("reference: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return bundle.ReferencedFile{}, fmt.Errorf("reference: read %s: %w", path, err)
	}
	return bundle.ReferencedFile{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
