package build

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/enginepatch"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/services/build/unpack"
)

// checkPatch checks the engine patch decl names (its file f, unpacked
// in dir) against the pinned engine source of decl's campaign, and
// returns what the record keeps of it. A patch the campaign does not take
// is an *unpack.Error with an enginepatch code (or
// reason.CampaignUnknownTask for a task no campaign runs); an engine
// source that cannot be read is the operator's to fix, and an error
// worth a retry.
func (b *Builder) checkPatch(dir string, decl *bundle.Declaration, f events.FileDigest) (*record.Patch, error) {
	camps := b.Campaigns
	if camps == nil {
		camps = campaign.Set{}
	}
	c, err := camps.Lookup(decl.TaskID)
	if errors.Is(err, campaign.ErrUnknownTask) {
		return nil, &unpack.Error{Code: reason.CampaignUnknownTask, Message: fmt.Sprintf(
			"the bundle's engine patch %s is for task %s, which no campaign of this arena runs", f.Path, decl.TaskID), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("build: campaign %s: %w", decl.TaskID, err)
	}
	src, err := b.sources.open(c)
	if pe := enginepatch.AsError(err); pe != nil {
		return nil, &unpack.Error{Code: pe.Code, Message: fmt.Sprintf("%s: %s", f.Path, pe.Message)}
	}
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	limit := src.Spec.MaxPatchBytes
	if limit <= 0 {
		limit = enginepatch.DefaultMaxPatchBytes
	}
	if f.Size > limit {
		return nil, &unpack.Error{Code: reason.PatchTooLarge, Message: fmt.Sprintf(
			"%s: the patch is %d bytes; the campaign takes patches of at most %d bytes", f.Path, f.Size, limit)}
	}
	data, err := readLimited(filepath.Join(dir, filepath.FromSlash(f.Path)), limit)
	if err != nil {
		return nil, err
	}
	sum, err := src.Check(data)
	if pe := enginepatch.AsError(err); pe != nil {
		return nil, &unpack.Error{Code: pe.Code, Message: fmt.Sprintf("%s: %s", f.Path, pe.Message)}
	}
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	return &record.Patch{Path: f.Path, Size: f.Size, SHA256: f.SHA256, Files: sum.Files, LinesAdded: sum.LinesAdded, LinesRemoved: sum.LinesRemoved,
		Revision: src.Spec.Revision, SourceDigest: sum.SourceDigest, EngineDigest: sum.EngineDigest}, nil
}

// readLimited reads at most limit+1 bytes of the file at p.
func readLimited(p string, limit int64) ([]byte, error) {
	r, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("build: read the engine patch: %w", err)
	}
	return data, nil
}

// sources keeps each campaign's opened engine source (its tree hashed
// once), by task, for the campaign version it was opened for: a new
// version (another *campaign.Campaign) opens its source again. Safe for
// concurrent use.
type sources struct {
	mu sync.Mutex
	by map[string]openedSource
}

type openedSource struct {
	camp *campaign.Campaign
	src  *enginepatch.Source
}

func (s *sources) open(c *campaign.Campaign) (*enginepatch.Source, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.by[c.TaskID]; ok && o.camp == c {
		return o.src, nil
	}
	src, err := enginepatch.ForCampaign(c)
	if err != nil {
		return nil, err
	}
	if s.by == nil {
		s.by = map[string]openedSource{}
	}
	s.by[c.TaskID] = openedSource{camp: c, src: src}
	return src, nil
}
