package contract

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// maxSmallFile bounds submission.json, config.json and
// hf_quant_config.json read back.
const maxSmallFile = 4 << 20

// Checker is the contract check itself, without a bus: a built bundle's
// manifest and files (read from Artifacts) and the campaigns in, a kept
// contract or a refusal out. It reads config.json and the safetensors
// headers only, never the tensor data.
type Checker struct {
	// Artifacts holds the built bundles.
	Artifacts artifact.Store
	// Campaigns are the tasks this arena runs.
	Campaigns campaign.Source
	// Hub reads the shards' headers of checkpoints by reference; nil
	// allows no repository host, so they are refused.
	Hub *hub.Client
}

// Run checks one built bundle: a kept contract becomes contract.completed
// with what the later stages need to serve the checkpoint.
//
// It returns a *stage.Refusal for a bundle that cannot be checked (its
// code, e.g. reason.CampaignUnknownTask or a safetensors code) and for a broken
// contract (the first violation's code, every violation in the message,
// the contract block as the detail); any other error (a store that does
// not answer) is worth a retry. The check is a pure function of the
// stored artifact and the campaign, so running it again gives the same
// answer.
func (c *Checker) Run(ctx context.Context, in events.BuildCompletedData) (events.ContractCompletedData, error) {
	ct, _, decl, err := c.check(ctx, in)
	if err != nil {
		return events.ContractCompletedData{}, err
	}
	if !ct.OK {
		return events.ContractCompletedData{}, broken(ct)
	}
	out := events.ContractCompletedData{SubmissionID: in.SubmissionID, Contract: ct, DetectedPrecision: ct.DetectedPrecision,
		TaskID: decl.TaskID, Split: decl.Split, BundleDigest: in.BundleDigest, Artifact: &in.Artifact, Patch: in.Patch}
	if decl.Engine != nil {
		out.KVCacheDType = decl.Engine.KVCacheDType
	}
	return out, nil
}

// broken is the refusal of a broken contract.
func broken(c record.Contract) error {
	if len(c.Violations) == 0 {
		// analyze never breaks a contract without saying why; a retry
		// ends in the dead-letter stream, where it is seen.
		return errors.New("contract: a broken contract without a violation")
	}
	msgs := make([]string, len(c.Violations))
	for i, v := range c.Violations {
		msgs[i] = v.Code + ": " + v.Message
	}
	return stage.Refuse(reason.Code(c.Violations[0].Code), "the checkpoint breaks its contract: "+strings.Join(msgs, "; ")).WithDetail(c)
}

// Check computes the contract of a built bundle, kept or broken. It
// returns the contract, the bytes of safetensors headers it read, and an
// error: a *stage.Refusal for input that cannot be checked, anything else
// for a store that failed.
func (c *Checker) Check(ctx context.Context, in events.BuildCompletedData) (record.Contract, int64, error) {
	ct, read, _, err := c.check(ctx, in)
	return ct, read, err
}

func (c *Checker) check(ctx context.Context, in events.BuildCompletedData) (record.Contract, int64, *bundle.Declaration, error) {
	m, err := c.Artifacts.Manifest(ctx, in.Artifact)
	switch {
	case errors.Is(err, artifact.ErrNotFound):
		return record.Contract{}, 0, nil, stage.Refusef(reason.ArtifactMissing, "the built bundle %s is not in the artifact store; submit again", in.Artifact.Object)
	case errors.Is(err, artifact.ErrCorrupt):
		return record.Contract{}, 0, nil, stage.Refuse(reason.ArtifactCorrupt, err.Error())
	case err != nil:
		return record.Contract{}, 0, nil, err
	}
	commit := ""
	if in.Reference != nil {
		commit = in.Reference.Commit
	}
	open, stop, err := c.opener(ctx, m, commit)
	if err != nil {
		return record.Contract{}, 0, nil, err
	}
	defer stop()

	declData, err := small(open, m, bundle.DeclarationFile)
	if err != nil {
		return record.Contract{}, 0, nil, err
	}
	decl, err := bundle.ParseDeclaration(declData)
	if err != nil {
		return record.Contract{}, 0, nil, stage.Refuse(reason.BundleBadDeclaration, err.Error())
	}
	camp, err := c.Campaigns.Lookup(decl.TaskID)
	if err != nil {
		return record.Contract{}, 0, nil, stage.Refuse(reason.CampaignUnknownTask, err.Error())
	}
	config, err := small(open, m, "config.json")
	if err != nil {
		return record.Contract{}, 0, nil, err
	}
	// ModelOpt's own quantization config, the only statement of the
	// scheme in checkpoints exported before ModelOpt wrote one into
	// config.json.
	var hfQuant []byte
	if _, ok := m.File(analyze.HFQuantConfigFile); ok {
		if hfQuant, err = small(open, m, analyze.HFQuantConfigFile); err != nil {
			return record.Contract{}, 0, nil, err
		}
	}

	// The top of the bundle is the checkpoint folder.
	sizes := map[string]int64{}
	for _, f := range m.Files {
		if !strings.Contains(f.Path, "/") {
			sizes[f.Path] = f.Size
		}
	}
	ck, err := safetensors.ReadCheckpointFrom(sizes, open)
	if r := hubRefusal(err); r != nil {
		return record.Contract{}, 0, nil, r
	}
	if err != nil {
		code := safetensors.CodeOf(err)
		if code == "" || code == reason.IOError {
			return record.Contract{}, 0, nil, fmt.Errorf("contract: read headers: %w", err)
		}
		return record.Contract{}, 0, nil, stage.Refuse(code, fileMessage(err))
	}
	kv := ""
	if decl.Engine != nil {
		kv = decl.Engine.KVCacheDType
	}
	ct, err := analyze.Analyze(analyze.Input{
		Config: config, HFQuantConfig: hfQuant, Checkpoint: ck, Source: camp.Source,
		Declared: decl.Solution.Precision, KVCacheDType: kv, Policy: camp.Policy.Analyze(),
	})
	if err != nil {
		code := analyze.CodeOf(err)
		if code == "" {
			return record.Contract{}, 0, nil, fmt.Errorf("contract: %w", err)
		}
		return record.Contract{}, 0, nil, stage.Refuse(code, err.Error())
	}
	ct.HeaderBytesRead = ck.BytesRead()
	return ct, ck.BytesRead(), decl, nil
}

// small reads a small file of the bundle whole, bounded.
func small(open safetensors.Opener, m artifact.Manifest, name string) ([]byte, error) {
	f, ok := m.File(name)
	if !ok {
		code := reason.BundleMissingConfig
		if name == bundle.DeclarationFile {
			code = reason.BundleBadDeclaration
		}
		return nil, stage.Refusef(code, "the bundle has no %s", name)
	}
	if f.Size > maxSmallFile {
		return nil, stage.Refusef(reason.ConfigInvalid, "%s is %d bytes; the limit is %d", name, f.Size, maxSmallFile)
	}
	r, err := open(name)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, stage.Refuse(reason.ArtifactMissing, err.Error())
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxSmallFile))
	if err != nil {
		return nil, fmt.Errorf("contract: read %s: %w", name, err)
	}
	return data, nil
}

// fileMessage turns a safetensors refusal into a sentence.
func fileMessage(err error) string {
	var e *safetensors.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	msg := safetensors.Describe(e.Code)
	if msg == "" {
		msg = string(e.Code)
	}
	where := e.File
	if e.Tensor != "" {
		where += fmt.Sprintf(", tensor %q", e.Tensor)
	}
	if where != "" {
		msg = where + ": " + msg
	}
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}
