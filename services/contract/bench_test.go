package contract_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/adapters/hub"
	"github.com/lowbarena/lowbarena/adapters/hub/hubtest"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/artifact/artifacttest"
	"github.com/lowbarena/lowbarena/services/contract"
)

// layout is a model's BF16 tensors, in the names and shapes of its
// transformers checkpoint.
type layout struct {
	name   string
	config map[string]any
	specs  []spec
}

type spec struct {
	name  string
	shape []int64
}

// qwen3 returns the BF16 layout of a Qwen3 model of these widths: dense
// when experts is 0, else a mixture of experts with a router per layer.
func qwen3(name string, layers, hidden, inter, heads, kvHeads, vocab, experts, moeInter int64) layout {
	const headDim = 128
	var s []spec
	s = append(s, spec{"model.embed_tokens.weight", []int64{vocab, hidden}})
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		s = append(s,
			spec{p + "input_layernorm.weight", []int64{hidden}},
			spec{p + "post_attention_layernorm.weight", []int64{hidden}},
			spec{p + "self_attn.q_proj.weight", []int64{heads * headDim, hidden}},
			spec{p + "self_attn.k_proj.weight", []int64{kvHeads * headDim, hidden}},
			spec{p + "self_attn.v_proj.weight", []int64{kvHeads * headDim, hidden}},
			spec{p + "self_attn.o_proj.weight", []int64{hidden, heads * headDim}},
			spec{p + "self_attn.q_norm.weight", []int64{headDim}},
			spec{p + "self_attn.k_norm.weight", []int64{headDim}},
		)
		if experts == 0 {
			s = append(s,
				spec{p + "mlp.gate_proj.weight", []int64{inter, hidden}},
				spec{p + "mlp.up_proj.weight", []int64{inter, hidden}},
				spec{p + "mlp.down_proj.weight", []int64{hidden, inter}})
			continue
		}
		s = append(s, spec{p + "mlp.gate.weight", []int64{experts, hidden}})
		for e := range experts {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			s = append(s,
				spec{q + "gate_proj.weight", []int64{moeInter, hidden}},
				spec{q + "up_proj.weight", []int64{moeInter, hidden}},
				spec{q + "down_proj.weight", []int64{hidden, moeInter}})
		}
	}
	s = append(s, spec{"model.norm.weight", []int64{hidden}}, spec{"lm_head.weight", []int64{vocab, hidden}})
	cfg := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3", "hidden_size": hidden, "intermediate_size": inter,
		"num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": headDim,
		"vocab_size": vocab, "max_position_embeddings": 40960, "rope_theta": 1000000, "rope_scaling": nil, "rms_norm_eps": 1e-6,
		"tie_word_embeddings": false, "torch_dtype": "bfloat16",
	}
	if experts > 0 {
		cfg["architectures"] = []string{"Qwen3MoeForCausalLM"}
		cfg["model_type"] = "qwen3_moe"
		cfg["num_experts"], cfg["moe_intermediate_size"], cfg["num_experts_per_tok"] = experts, moeInter, 8
	}
	return layout{name: name, config: cfg, specs: s}
}

// write writes the layout, sparse (headers only on disk), in shards of
// about 5 GB with an index, and a campaign whose source model it is.
func (l layout) write(tb testing.TB, ckpt, campaigns string) (params int64) {
	tb.Helper()
	const shardBytes = 5 << 30
	var groups [][]spec
	var cur []spec
	var curBytes int64
	tensors := map[string]any{}
	for _, s := range l.specs {
		n := int64(2)
		for _, d := range s.shape {
			n *= d
		}
		params += n / 2
		tensors[s.name] = map[string]any{"dtype": "BF16", "shape": s.shape}
		if curBytes+n > shardBytes && len(cur) > 0 {
			groups = append(groups, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, s)
		curBytes += n
	}
	groups = append(groups, cur)
	weightMap := map[string]string{}
	for i, g := range groups {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(groups))
		var w safetensors.Writer
		w.Metadata = map[string]string{"format": "pt"}
		for _, s := range g {
			w.MustAdd(s.name, safetensors.BF16, s.shape, nil)
			weightMap[s.name] = name
		}
		_, err := w.WriteFile(filepath.Join(ckpt, name))
		require.NoError(tb, err)
	}
	writeJSON(tb, filepath.Join(ckpt, safetensors.IndexFile), map[string]any{"metadata": map[string]any{"total_size": 2 * params}, "weight_map": weightMap})
	writeJSON(tb, filepath.Join(ckpt, "config.json"), l.config)
	writeJSON(tb, filepath.Join(ckpt, bundle.DeclarationFile), map[string]any{"task_id": l.name, "split": "dev", "participant": "bench",
		"solution": map[string]any{"checkpoint": l.name + "-bf16", "method": "BF16"}, "engine": map[string]any{"kv_cache_dtype": "auto"}})
	dir := filepath.Join(campaigns, l.name)
	require.NoError(tb, os.MkdirAll(dir, 0o755))
	writeJSON(tb, filepath.Join(dir, campaign.File), map[string]any{"task_id": l.name, "name": l.name, "policy": map[string]any{}})
	writeJSON(tb, filepath.Join(dir, campaign.ConfigFile), l.config)
	writeJSON(tb, filepath.Join(dir, campaign.TensorsFile), map[string]any{"tensors": tensors})
	return params
}

func writeJSON(tb testing.TB, path string, v any) {
	tb.Helper()
	data, err := json.Marshal(v)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(path, data, 0o644))
}

// BenchmarkContractByReference is the contract stage's check of a BF16
// checkpoint of about 30 billion parameters submitted by reference, its
// shards served by a model hub on loopback: the manifest, checkpoint.json,
// config and index from the artifact store (memory), each shard's header
// over two HTTP Range requests, and the analysis. The shards are sparse
// files (headers only on disk) and their declared sha256 are placeholders:
// the contract never reads a shard's data, so never checks them (the
// staging benchmark does). One op is one whole check.
func BenchmarkContractByReference(b *testing.B) {
	for _, l := range []layout{
		// Qwen3-32B's widths: 64 layers, hidden 5120, 64 query and 8
		// key/value heads, intermediate 25600, vocabulary 151936.
		qwen3("dense-32b", 64, 5120, 25600, 64, 8, 151936, 0, 0),
		// Qwen3-30B-A3B's: 48 layers, hidden 2048, 32 and 4 heads, 128
		// experts of intermediate 768.
		qwen3("moe-30b-a3b", 48, 2048, 6144, 32, 4, 151936, 128, 768),
	} {
		b.Run(l.name, func(b *testing.B) {
			ckpt, campaigns := b.TempDir(), b.TempDir()
			params := l.write(b, ckpt, campaigns)
			set, err := campaign.LoadDir(campaigns)
			require.NoError(b, err)
			srv, err := hubtest.Dir(ckpt)
			require.NoError(b, err)
			defer srv.Close()
			srv.WithoutDigests()
			store := artifacttest.NewMemory()
			in := storeBench(b, store, ckpt, srv)
			c := &contract.Checker{Artifacts: store, Campaigns: set, Hub: hub.New(hub.Options{Hosts: []string{srv.Host()}})}
			ctx := context.Background()

			ct, read, err := c.Check(ctx, in)
			require.NoError(b, err)
			require.True(b, ct.OK, "%+v", ct.Violations)
			srv.Reset()
			b.ResetTimer()
			for b.Loop() {
				if _, read, err = c.Check(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			ops := float64(b.N)
			b.ReportMetric(float64(read), "header_bytes/op")
			b.ReportMetric(float64(srv.BytesSent())/ops, "http_body_bytes/op")
			b.ReportMetric(float64(len(srv.Requests()))/ops, "requests/op")
			b.ReportMetric(float64(params)/1e9, "Gparams")
			b.ReportMetric(float64(ct.SafetensorBytes)/1e9, "checkpoint_GB")
			b.ReportMetric(float64(len(l.specs)), "tensors")
		})
	}
}

// storeBench stores the checkpoint in dir as the build stage would by
// reference (the small files, a checkpoint.json naming srv), with
// placeholder digests for the sparse shards.
func storeBench(tb testing.TB, store artifact.Store, dir string, srv *hubtest.Server) events.BuildCompletedData {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(tb, err)
	ctx := context.Background()
	ref := bundle.Reference{Repository: srv.Repository(), Revision: hubtest.Revision}
	var files []events.FileDigest
	put := func(name string, data []byte) events.FileDigest {
		sum := sha256.Sum256(data)
		fd := events.FileDigest{Path: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		_, err := store.PutFile(ctx, fd.SHA256, fd.Size, bytesReader(data))
		require.NoError(tb, err)
		return fd
	}
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(tb, err)
		if bundle.Remote(e.Name()) {
			sum := sha256.Sum256([]byte("placeholder " + e.Name()))
			fd := events.FileDigest{Path: e.Name(), Size: info.Size(), SHA256: hex.EncodeToString(sum[:])}
			files = append(files, fd)
			ref.Files = append(ref.Files, bundle.ReferencedFile{Path: fd.Path, Size: fd.Size, SHA256: fd.SHA256})
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(tb, err)
		fd := put(e.Name(), data)
		files = append(files, fd)
		if e.Name() != bundle.DeclarationFile {
			ref.Files = append(ref.Files, bundle.ReferencedFile{Path: fd.Path, Size: fd.Size, SHA256: fd.SHA256})
		}
	}
	refData, err := json.Marshal(ref)
	require.NoError(tb, err)
	files = append(files, put(bundle.CheckpointFile, refData))
	m := artifact.NewManifest(files)
	out, err := store.PutManifest(ctx, m)
	require.NoError(tb, err)
	return events.BuildCompletedData{SubmissionID: "bench", BundleDigest: m.Digest, Files: m.Files, Bytes: m.Bytes, Artifact: out}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
