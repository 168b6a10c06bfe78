package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/platform/app"
)

// describeRemote is describe without a local copy: the files at the top
// of the repository come from the hub's tree API (hub.Client.Tree), each
// with its size, and an LFS file (every shard) with the sha256 the hub
// names for it, so no shard is downloaded; only the small files stored
// in git itself (configs, tokenizer files) are fetched, to hash them. The
// result is what describe writes for a local copy of the same revision.
// A private repository on huggingface.co is read with HF_TOKEN.
func describeRemote(ctx context.Context, repository, revision string, progress io.Writer) (*bundle.Reference, []string, error) {
	repo, err := modelrepo.Parse(repository, revision)
	if err != nil {
		return nil, nil, err
	}
	opts := hub.Options{Hosts: []string{repo.Base.Host}, Tokens: map[string]string{}}
	if tok := os.Getenv(app.EnvHFToken); tok != "" {
		opts.Tokens[hub.DefaultHost] = tok
	}
	c := hub.New(opts)
	fmt.Fprintf(progress, "listing the files of %s\n", repo)
	tree, err := c.Tree(ctx, repo)
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(tree, func(a, b hub.TreeFile) int { return strings.Compare(a.Path, b.Path) })
	ref := bundle.Reference{Repository: repository, Revision: revision}
	var skipped []string
	for _, f := range tree {
		// The files at the top of the repository, as describe reads the
		// top of a local copy (folders are not part of a checkpoint).
		if strings.Contains(f.Path, "/") {
			continue
		}
		if !referenced(f.Path) {
			if !strings.HasPrefix(f.Path, ".") {
				skipped = append(skipped, f.Path)
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		sum := f.SHA256
		if sum == "" {
			if sum, err = c.Digest(ctx, repo, f.Path, f.Size); err != nil {
				return nil, nil, err
			}
		}
		if f.Size > 256<<20 {
			fmt.Fprintf(progress, "  %s: %s, sha256 %s (the hub's)\n", f.Path, bundle.HumanSize(f.Size), short(sum))
		}
		ref.Files = append(ref.Files, bundle.ReferencedFile{Path: f.Path, Size: f.Size, SHA256: sum})
	}
	checked, err := checkReference(ref)
	if err != nil {
		return nil, nil, err
	}
	return checked, skipped, nil
}
