package efficiency_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/services/efficiency"
)

// exampleCampaign writes the example campaigns and returns them.
func exampleCampaigns(t *testing.T) campaign.Set {
	t.Helper()
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	// The dev suite the quality stage answers and the audits mix into
	// the load, small.
	st := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.Sizes{"math": 8, "knowledge": 8})
	require.NoError(t, suite.Write(filepath.Join(dir, examples.CampaignsDir, examples.TaskID, "suite-dev"), st))
	set, err := campaign.LoadDir(filepath.Join(dir, examples.CampaignsDir))
	require.NoError(t, err)
	return set
}

// withoutWeights is c with a reference folder that holds its config but
// no *.safetensors.
func withoutWeights(t *testing.T, c campaign.Campaign) *campaign.Campaign {
	t.Helper()
	c.Dir = t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(c.Dir, "reference"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(c.Dir, "reference", "config.json"), []byte(`{}`), 0o644))
	c.Reference = "reference"
	return &c
}

var artifactRef = &events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/a.json", Size: 1, SHA256: strings.Repeat("ab", 32), Files: 3}

func kept(id string) events.ContractCompletedData {
	return events.ContractCompletedData{SubmissionID: id, Contract: record.Contract{OK: true}, DetectedPrecision: "W8A8KV8",
		TaskID: examples.TaskID, Artifact: artifactRef, KVCacheDType: "fp8"}
}

// TestJob is the request side's decisions: a kept contract and its
// campaign become one runner job, or a refusal; a campaign refused for its
// reference folder stores nothing; a store that fails is a retry.
func TestJob(t *testing.T) {
	set := exampleCampaigns(t)
	camp := *set[examples.TaskID]
	noEngine := camp
	noEngine.Engine = nil
	missing := camp
	missing.Reference = "no-such-folder"
	stored := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/ref.json", SHA256: strings.Repeat("cd", 32), Files: 2}
	noArtifact := kept("sub1")
	noArtifact.Artifact = nil
	unknown := kept("sub1")
	unknown.TaskID = "qwen9-huge"
	for _, tc := range []struct {
		name     string
		in       events.ContractCompletedData
		camp     *campaign.Campaign
		storeErr error
		reason   reason.Code // "" for a job
		stores   bool        // the reference is stored
	}{
		{name: "a kept contract", in: kept("sub1"), camp: &camp, stores: true},
		{name: "no artifact", in: noArtifact, camp: &camp, reason: reason.ArtifactMissing},
		{name: "a task no campaign runs", in: unknown, camp: &camp, reason: reason.CampaignUnknownTask},
		{name: "a campaign without an engine", in: kept("sub1"), camp: &noEngine, reason: reason.CampaignNoEngine},
		{name: "a reference folder without weights", in: kept("sub1"), camp: withoutWeights(t, camp), reason: reason.CampaignNoReference},
		{name: "a reference folder that does not exist", in: kept("sub1"), camp: &missing, reason: reason.CampaignNoReference},
		{name: "a store that fails", in: kept("sub1"), camp: &camp, storeErr: errors.New("object store down"), stores: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls int
			store := func(c *campaign.Campaign) (events.BundleRef, error) {
				calls++
				require.Equal(t, tc.camp.TaskID, c.TaskID)
				return stored, tc.storeErr
			}
			j, err := efficiency.Job(tc.in, campaign.Set{examples.TaskID: tc.camp}, store, nil, nil)
			require.Equal(t, tc.stores, calls == 1, "the reference is stored only for a campaign that can serve")
			switch {
			case tc.storeErr != nil:
				require.ErrorIs(t, err, tc.storeErr)
				require.Nil(t, stage.AsRefusal(err), "a store error is a retry")
				return
			case tc.reason != "":
				r := stage.AsRefusal(err)
				require.NotNil(t, r, "a refusal: %v", err)
				require.Equal(t, tc.reason, r.Code)
				require.NotEmpty(t, r.Message)
				return
			}
			require.NoError(t, err)
			require.Equal(t, efficiency.JobID("sub1"), j.Request.JobID)
			require.Equal(t, events.JobEfficiency, j.Request.Kind)
			require.Equal(t, "sub1", j.Request.SubmissionID)
			require.Equal(t, examples.EngineCommand, j.Request.Engine)
			require.Equal(t, *artifactRef, j.Request.Checkpoint)
			var p events.EfficiencyJobParams
			require.NoError(t, json.Unmarshal(j.Request.Params, &p))
			require.Equal(t, events.EfficiencyJobParams{Campaign: examples.TaskID, Engine: *camp.Engine, Workload: camp.Efficiency.WorkloadSpec,
				KVCacheDType: "fp8", Reference: stored, BudgetFactor: 1.02}, p)
			require.Equal(t, 64, p.Workload.MaxTokens)
			require.Equal(t, 256, p.Engine.MaxNumSeqs)
		})
	}
}

// TestJobComparesAPatchedEngine checks the audits' params of a kept
// contract: a submission that patches the engine names the campaign's
// engine without its pinned source as the unpatched engine to compare
// with; one without a patch names none; a campaign without a quality
// suite gathers no audits' evidence, patch or not.
func TestJobComparesAPatchedEngine(t *testing.T) {
	set := exampleCampaigns(t)
	camp := *set[examples.TaskID]
	engine := *camp.Engine
	engine.Source = &campaign.EngineSource{Dir: "engine-src", Revision: "simengine 1", Kind: campaign.SourceGo,
		Build: "go build -o {{.Out}} .", Allow: []string{"*.go"}, MaxPatchBytes: 1 << 16}
	camp.Engine = &engine
	noQuality := camp
	noQuality.Quality = nil
	patched := kept("sub1")
	patched.Patch = &record.Patch{Path: examples.PatchFile, Size: 42, SHA256: strings.Repeat("ef", 32)}
	unpatched := engine
	unpatched.Source = nil
	store := func(*campaign.Campaign) (events.BundleRef, error) { return events.BundleRef{}, nil }
	audit := func(*campaign.Campaign, string) (*events.AuditJobParams, error) {
		return &events.AuditJobParams{SuiteKey: "lowb-gen@1/dev", Probes: 8}, nil
	}
	for _, tc := range []struct {
		name      string
		in        events.ContractCompletedData
		camp      *campaign.Campaign
		audit     bool
		unpatched *events.EngineSpec
	}{
		{name: "a patched engine", in: patched, camp: &camp, audit: true, unpatched: &unpatched},
		{name: "the campaign's engine", in: kept("sub1"), camp: &camp, audit: true},
		{name: "a patched engine, a campaign without a quality suite", in: patched, camp: &noQuality},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := efficiency.Job(tc.in, campaign.Set{examples.TaskID: tc.camp}, store, audit, nil)
			require.NoError(t, err)
			var p events.EfficiencyJobParams
			require.NoError(t, json.Unmarshal(j.Request.Params, &p))
			require.Equal(t, engine, p.Engine, "the measured engine is the campaign's, source and all")
			if !tc.audit {
				require.Nil(t, p.Audit)
				return
			}
			require.NotNil(t, p.Audit)
			require.Equal(t, tc.unpatched, p.Audit.Unpatched)
			if tc.unpatched != nil {
				require.Equal(t, engine.Command, p.Audit.Unpatched.Command, "the same command, without the patch")
				require.Nil(t, p.Audit.Unpatched.Source)
			}
		})
	}
}

// TestJobPatchedEngine: a submission whose build checked an engine patch
// is measured on its patched engine (the campaign's pinned source tree,
// stored, and the patch's path in the bundle); one without a patch, or
// on a campaign that pins no source, runs the campaign's own engine and
// stores no source. A store that fails is a retry.
func TestJobPatchedEngine(t *testing.T) {
	set := exampleCampaigns(t)
	camp := *set[examples.TaskID]
	require.NotNil(t, camp.Engine.Source, "the example campaign pins its engine source")
	noSource := camp
	engineSpec := *camp.Engine
	engineSpec.Source = nil
	noSource.Engine = &engineSpec
	reference := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/ref.json", SHA256: strings.Repeat("cd", 32), Files: 2}
	source := events.BundleRef{Store: "jetstream", Bucket: bus.ObjectArtifacts, Object: "bundles/src.json", SHA256: strings.Repeat("ef", 32), Files: 40}
	patched := kept("sub1")
	patched.Patch = &record.Patch{Path: "engine.patch", Size: 10, SHA256: strings.Repeat("12", 32), EngineDigest: strings.Repeat("34", 32)}
	for _, tc := range []struct {
		name     string
		in       events.ContractCompletedData
		camp     *campaign.Campaign
		storeErr error
		patched  bool // the job names the patched engine
	}{
		{name: "a patched submission", in: patched, camp: &camp, patched: true},
		{name: "an honest submission", in: kept("sub1"), camp: &camp},
		{name: "a patch on a campaign without a pinned source", in: patched, camp: &noSource},
		{name: "a store that fails", in: patched, camp: &camp, storeErr: errors.New("object store down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dirs []string
			engine := func(c *campaign.Campaign) (events.BundleRef, error) {
				dirs = append(dirs, c.EngineSourceDir())
				return source, tc.storeErr
			}
			store := func(*campaign.Campaign) (events.BundleRef, error) { return reference, nil }
			j, err := efficiency.Job(tc.in, campaign.Set{examples.TaskID: tc.camp}, store, nil, engine)
			if tc.storeErr != nil {
				require.ErrorIs(t, err, tc.storeErr)
				require.Nil(t, stage.AsRefusal(err), "a store error is a retry")
				return
			}
			require.NoError(t, err)
			var p events.EfficiencyJobParams
			require.NoError(t, json.Unmarshal(j.Request.Params, &p))
			if !tc.patched {
				require.Nil(t, p.EngineBundle)
				require.Empty(t, p.Patch)
				require.Empty(t, p.EngineDigest)
				require.Empty(t, dirs, "no engine source stored")
				return
			}
			require.Equal(t, &source, p.EngineBundle)
			require.Equal(t, "engine.patch", p.Patch)
			require.Equal(t, patched.Patch.EngineDigest, p.EngineDigest, "the runner builds only the tree the build checked")
			require.Equal(t, []string{filepath.Join(camp.Dir, examples.EngineSourceDir)}, dirs)
			require.Equal(t, camp.Engine.Source, p.Engine.Source, "the runner builds against the source the params pin")
		})
	}
}
