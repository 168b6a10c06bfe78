package contract_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact/artifacttest"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/stage"
	"github.com/lowbarena/lowbarena/platform/stage/stagetest"
	"github.com/lowbarena/lowbarena/services/contract"
)

// TestContractDecides runs the check without a bus: a built bundle's
// manifest and files (in memory) and the example campaign in; a kept
// contract, or a refusal's code (and, for a broken contract, its block),
// out.
func TestContractDecides(t *testing.T) {
	t.Parallel()
	_, set, exs := writeExamples(t)
	editFile := func(name string, edit func(string) string) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, name)
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, []byte(edit(string(data))), 0o644))
		}
	}
	writeFile := func(name string, data []byte) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
		}
	}
	remove := func(name string) func(*testing.T, string) {
		return func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, name))) }
	}
	camp, err := set.Lookup(examples.TaskID)
	require.NoError(t, err)
	// modelOpt turns a bundle into an older ModelOpt NVFP4 export: its
	// scheme only in hf_quant_config.json (when withConfig), none in
	// config.json, its weights as ModelOpt writes them (header only).
	modelOpt := func(withConfig bool) func(*testing.T, string) {
		return func(t *testing.T, dir string) {
			editFile("config.json", func(s string) string {
				var cfg map[string]any
				require.NoError(t, json.Unmarshal([]byte(s), &cfg))
				delete(cfg, "quantization_config")
				data, err := json.Marshal(cfg)
				require.NoError(t, err)
				return string(data)
			})(t, dir)
			if withConfig {
				writeFile(analyze.HFQuantConfigFile, []byte(`{"producer": {"name": "modelopt", "version": "0.27.1"},
  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16, "exclude_modules": ["lm_head"]}}`))(t, dir)
			}
			var w safetensors.Writer
			for _, name := range camp.Source.Tensors.Names() {
				st := camp.Source.Tensors.Tensors[name]
				m, ok := strings.CutSuffix(name, ".weight")
				if !ok || len(st.Shape) != 2 || strings.Contains(name, "embed") || name == "lm_head.weight" {
					w.MustAdd(name, safetensors.DType(st.DType), st.Shape, nil)
					continue
				}
				w.MustAdd(name, safetensors.U8, []int64{st.Shape[0], st.Shape[1] / 2}, nil)
				w.MustAdd(m+".weight_scale", safetensors.F8E4M3, []int64{st.Shape[0], st.Shape[1] / 16}, nil)
				w.MustAdd(m+".weight_scale_2", safetensors.F32, []int64{}, nil)
				w.MustAdd(m+".input_scale", safetensors.F32, []int64{}, nil)
			}
			paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			require.NoError(t, err)
			for _, p := range paths {
				require.NoError(t, os.Remove(p))
			}
			_, err = w.WriteFile(filepath.Join(dir, "model.safetensors"))
			require.NoError(t, err)
		}
	}
	cases := []struct {
		name string
		from string
		// change edits the bundle folder before it is stored.
		change func(t *testing.T, dir string)
		// stored edits what the store holds or what build.completed says.
		stored    func(s *artifacttest.Memory, in *events.BuildCompletedData)
		campaigns campaign.Set
		code      reason.Code // "" for a kept contract
	}{
		{name: "kept: int4 in one file", from: "int4-w4a16-g32"},
		{name: "kept: fp8 in two shards", from: "fp8-w8a8"},
		{name: "kept: nvfp4", from: "nvfp4-w4a4"},
		{name: "kept: the bf16 reference", from: "bf16-reference"},
		{name: "kept: a patched engine, its patch carried forward", from: "int4-w4a16-g32",
			stored: func(_ *artifacttest.Memory, in *events.BuildCompletedData) {
				in.Patch = &record.Patch{Path: examples.PatchFile, Size: 42, SHA256: strings.Repeat("ab", 32), Files: []string{"tools/simengine/server.go"}, LinesAdded: 3, LinesRemoved: 1}
			}},
		{name: "kept: ModelOpt NVFP4, its scheme in hf_quant_config.json", from: "nvfp4-w4a4", change: modelOpt(true)},
		{name: "ModelOpt NVFP4 without hf_quant_config.json reads A16", from: "nvfp4-w4a4", change: modelOpt(false),
			code: reason.PrecisionWiderThanDeclared},
		{name: "hf_quant_config.json not JSON", from: "nvfp4-w4a4",
			change: writeFile(analyze.HFQuantConfigFile, []byte(`{"producer":`)), code: reason.ConfigInvalid},
		{name: "hf_quant_config.json too large", from: "nvfp4-w4a4",
			change: writeFile(analyze.HFQuantConfigFile, make([]byte, 4<<20+1)), code: reason.ConfigInvalid},
		{name: "broken: foreign tensors", from: "foreign-tensors", code: reason.ForeignTensors},
		{name: "broken: wider precision than declared", from: "bf16-declared-w4", code: reason.PrecisionWiderThanDeclared},
		{name: "broken: a changed rope", from: "rope-theta-changed", code: reason.RopeChanged},
		{name: "unknown task", from: "int4-w4a16-g32",
			change: editFile("submission.json", func(s string) string { return strings.Replace(s, examples.TaskID, "llama-9000", 1) }),
			code:   reason.CampaignUnknownTask},
		{name: "no campaign at all", from: "int4-w4a16-g32", campaigns: campaign.Set{}, code: reason.CampaignUnknownTask},
		{name: "missing config", from: "int4-w4a16-g32", change: remove("config.json"), code: reason.BundleMissingConfig},
		{name: "config too large", from: "int4-w4a16-g32", change: writeFile("config.json", make([]byte, 4<<20+1)),
			code: reason.ConfigInvalid},
		{name: "bad declaration", from: "int4-w4a16-g32", change: writeFile("submission.json", []byte(`{"task_id": 7`)),
			code: reason.BundleBadDeclaration},
		{name: "no declaration", from: "int4-w4a16-g32", change: remove("submission.json"), code: reason.BundleBadDeclaration},
		{name: "unknown kv cache dtype", from: "int4-w4a16-g32",
			change: editFile("submission.json", func(s string) string {
				return strings.Replace(s, `"kv_cache_dtype": "fp8"`, `"kv_cache_dtype": "fp3"`, 1)
			}),
			code: reason.KVDTypeUnknown},
		{name: "a truncated safetensors header", from: "int4-w4a16-g32", change: writeFile("model.safetensors", []byte{1, 2, 3}),
			code: reason.HeaderTruncated},
		{name: "a missing shard", from: "fp8-w8a8", change: remove("model-00002-of-00002.safetensors"),
			code: reason.IndexShardMissing},
		{name: "the manifest is not stored", from: "int4-w4a16-g32",
			stored: func(s *artifacttest.Memory, in *events.BuildCompletedData) { s.DeleteManifest(in.Artifact.Object) },
			code:   reason.ArtifactMissing},
		{name: "the manifest is not the one built", from: "int4-w4a16-g32",
			stored: func(_ *artifacttest.Memory, in *events.BuildCompletedData) {
				in.Artifact.SHA256 = strings.Repeat("0", 64)
			},
			code: reason.ArtifactCorrupt},
		{name: "config.json is not stored", from: "int4-w4a16-g32",
			stored: func(s *artifacttest.Memory, in *events.BuildCompletedData) {
				i := slices.IndexFunc(in.Files, func(f events.FileDigest) bool { return f.Path == "config.json" })
				s.DeleteFile(in.Files[i].SHA256)
			},
			code: reason.ArtifactMissing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ex := exs[tc.from]
			dir := ex.Dir
			if tc.change != nil {
				dir = copyDir(t, ex.Dir)
				tc.change(t, dir)
			}
			store := artifacttest.NewMemory()
			in := put(t, store, "sub", dir)
			if tc.stored != nil {
				tc.stored(store, &in)
			}
			camps := set
			if tc.campaigns != nil {
				camps = tc.campaigns
			}
			out, err := (&contract.Checker{Artifacts: store, Campaigns: camps}).Run(context.Background(), in)
			if tc.code == "" {
				require.NoError(t, err)
				require.True(t, ex.Honest, "the example is honest")
				require.True(t, out.Contract.OK)
				require.Equal(t, "sub", out.SubmissionID)
				require.Equal(t, ex.Detected, out.DetectedPrecision)
				require.Equal(t, ex.Declared, out.Contract.DeclaredPrecision)
				require.Equal(t, examples.TaskID, out.TaskID)
				require.Equal(t, "dev", out.Split)
				require.Equal(t, in.BundleDigest, out.BundleDigest)
				require.Equal(t, &in.Artifact, out.Artifact)
				require.NotEmpty(t, out.KVCacheDType)
				require.Equal(t, in.Patch, out.Patch, "the patch build.completed named, or none")
				return
			}
			r := stage.AsRefusal(err)
			require.NotNil(t, r, "a refusal, not a retry: %v", err)
			require.Equal(t, tc.code, r.Code, r.Message)
			require.NotEmpty(t, r.Message)
			if tc.change == nil && tc.stored == nil && tc.campaigns == nil {
				// A broken contract: every violation named, the block
				// beside it.
				require.False(t, ex.Honest)
				require.True(t, strings.HasPrefix(r.Message, "the checkpoint breaks its contract: "), r.Message)
				var c record.Contract
				require.NoError(t, json.Unmarshal(r.Detail, &c), "the contract block travels with the refusal")
				require.False(t, c.OK)
				codes := []string{}
				for _, v := range c.Violations {
					codes = append(codes, v.Code)
					require.Contains(t, r.Message, v.Code+": "+v.Message)
				}
				slices.Sort(codes)
				require.Equal(t, ex.Violations, codes)
				require.Equal(t, ex.Detected, c.DetectedPrecision)
				require.Equal(t, ex.Declared, c.DeclaredPrecision)
			} else if strings.HasPrefix(r.Message, "the checkpoint breaks its contract: ") {
				var c record.Contract
				require.NoError(t, json.Unmarshal(r.Detail, &c), "the contract block travels with the refusal")
				require.Equal(t, string(tc.code), c.Violations[0].Code)
			} else {
				require.Empty(t, r.Detail, "only a broken contract carries a contract block")
			}
		})
	}
}

// TestContractRetriesAStoreThatFails: an artifact store that does not
// answer is no refusal; the participant has nothing to fix.
func TestContractRetriesAStoreThatFails(t *testing.T) {
	t.Parallel()
	_, set, exs := writeExamples(t)
	store := artifacttest.NewMemory()
	in := put(t, store, "sub", exs["int4-w4a16-g32"].Dir)
	down := errors.New("nats: no responders")
	store.Fail(down)
	_, err := (&contract.Checker{Artifacts: store, Campaigns: set}).Run(context.Background(), in)
	require.ErrorIs(t, err, down)
	require.Nil(t, stage.AsRefusal(err))
}

// TestStageContract runs the stage kit's contract against the contract
// stage's own declaration.
func TestStageContract(t *testing.T) {
	t.Parallel()
	in := bustest.Sample(events.BuildCompleted).(*events.BuildCompletedData)
	out := bustest.Sample(events.ContractCompleted).(*events.ContractCompletedData)
	out.TaskID = examples.TaskID
	stagetest.Contract(t, contract.Stage(&contract.Checker{}), *in, *out)
}

// TestComponentFlags checks the campaigns flag the contract command had
// and the name arena up sets.
func TestComponentFlags(t *testing.T) {
	t.Setenv(app.EnvCampaigns, "")
	c := contract.Component()
	require.Equal(t, contract.Name, c.Name)
	require.Equal(t, []string{"contract"}, c.Stages)
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	f := fs.Lookup("campaigns")
	require.NotNil(t, f)
	require.Empty(t, f.DefValue, "the campaigns bucket by default")
	require.NoError(t, app.Set(fs, map[string]string{"campaigns": "/data/campaigns", "work": "/data/build"}))
	require.Equal(t, "/data/campaigns", f.Value.String())
}
