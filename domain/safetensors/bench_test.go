package safetensors_test

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// layout28B writes, sparse, the BF16 safetensors layout of a Qwen-style
// dense model of about 28 billion parameters (64 layers, hidden 5120,
// intermediate 22016, 48 query heads and 8 key/value heads of 128, vocabulary
// 151936) sharded into files of about 5 GB with an index, and returns the
// parameter count and the total file size.
func layout28B(tb testing.TB, dir string) (params, size int64) {
	tb.Helper()
	const (
		layers, hidden, inter, vocab = 64, 5120, 22016, 151936
		q, kv, headDim               = 48 * 128, 8 * 128, 128
		shardBytes                   = 5 << 30
	)
	type spec struct {
		name  string
		shape []int64
	}
	var specs []spec
	specs = append(specs, spec{"model.embed_tokens.weight", []int64{vocab, hidden}})
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		specs = append(specs,
			spec{p + "input_layernorm.weight", []int64{hidden}},
			spec{p + "post_attention_layernorm.weight", []int64{hidden}},
			spec{p + "self_attn.q_proj.weight", []int64{q, hidden}},
			spec{p + "self_attn.k_proj.weight", []int64{kv, hidden}},
			spec{p + "self_attn.v_proj.weight", []int64{kv, hidden}},
			spec{p + "self_attn.o_proj.weight", []int64{hidden, q}},
			spec{p + "self_attn.q_norm.weight", []int64{headDim}},
			spec{p + "self_attn.k_norm.weight", []int64{headDim}},
			spec{p + "mlp.gate_proj.weight", []int64{inter, hidden}},
			spec{p + "mlp.up_proj.weight", []int64{inter, hidden}},
			spec{p + "mlp.down_proj.weight", []int64{hidden, inter}},
		)
	}
	specs = append(specs, spec{"model.norm.weight", []int64{hidden}}, spec{"lm_head.weight", []int64{vocab, hidden}})

	var groups [][]spec
	var cur []spec
	var curBytes int64
	for _, s := range specs {
		n := int64(2)
		for _, d := range s.shape {
			n *= d
		}
		params += n / 2
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
		n, err := w.WriteFile(filepath.Join(dir, name))
		require.NoError(tb, err)
		size += n
	}
	index(tb, dir, weightMap)
	return params, size
}

// BenchmarkScan28B reads every header of a sharded 28B checkpoint layout,
// as the contract stage does. The files are sparse: only headers are on
// disk, and only headers are read.
func BenchmarkScan28B(b *testing.B) {
	dir := b.TempDir()
	params, size := layout28B(b, dir)
	var c *safetensors.Checkpoint
	b.ResetTimer()
	for b.Loop() {
		var err error
		if c, err = safetensors.ReadCheckpoint(dir); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	require.Equal(b, size, c.FileBytes())
	b.ReportMetric(float64(c.BytesRead()), "bytes_read/op")
	b.ReportMetric(float64(len(c.Files)), "shards")
	b.ReportMetric(float64(len(c.Tensors())), "tensors")
	b.ReportMetric(float64(params)/1e9, "Gparams")
	b.ReportMetric(float64(size)/1e9, "checkpoint_GB")
}

// BenchmarkDigestSHA256 measures sha256 over a real 64 MiB file read from
// disk (the page cache, after the first pass), the build stage's per-file
// digest.
func BenchmarkDigestSHA256(b *testing.B) {
	path := filepath.Join(b.TempDir(), "blob.bin")
	data := make([]byte, 64<<20)
	_, _ = rand.Read(data)
	require.NoError(b, os.WriteFile(path, data, 0o600))
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		h := sha256.New()
		if _, err := io.CopyBuffer(h, f, buf); err != nil {
			b.Fatal(err)
		}
		_ = h.Sum(nil)
		_ = f.Close()
	}
}
