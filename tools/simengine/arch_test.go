package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/stretchr/testify/require"
)

// qwen3_8B is Qwen3-8B's config.json, the example campaign's source model.
const qwen3_8B = "hidden_size=4096,num_hidden_layers=36,num_attention_heads=32,num_key_value_heads=8,head_dim=128," +
	"intermediate_size=12288,vocab_size=151936,tie_word_embeddings=false,max_position_embeddings=40960"

func TestRoleOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Role
	}{
		{"model.embed_tokens.weight", RoleEmbed},
		{"lm_head.weight", RoleLMHead},
		{"model.layers.0.self_attn.q_proj.weight", RoleQ},
		{"model.layers.3.self_attn.k_proj.weight_scale", RoleK},
		{"model.layers.3.self_attn.v_proj.weight_zero_point", RoleV},
		{"model.layers.3.self_attn.o_proj.weight_global_scale", RoleO},
		{"model.layers.1.mlp.gate_proj.weight_packed", RoleGate},
		{"model.layers.1.mlp.up_proj.weight_shape", RoleUp},
		{"model.layers.1.mlp.down_proj.input_global_scale", RoleDown},
		{"model.layers.1.self_attn.q_norm.weight", RoleNorm},
		{"model.layers.1.post_attention_layernorm.weight", RoleNorm},
		{"model.norm.weight", RoleNorm},
		{"model.layers.0.mlp.down_proj.lora_A.weight", RoleOther},
		{"score.weight", RoleOther},
	} {
		require.Equal(t, tc.want, RoleOf(tc.name), tc.name)
	}
}

func TestReadSourceArch(t *testing.T) {
	a, err := ReadSourceArch(qwen3_8B)
	require.NoError(t, err)
	require.Equal(t, Arch{Hidden: 4096, Layers: 36, Heads: 32, KVHeads: 8, HeadDim: 128, Intermediate: 12288, Vocab: 151936, MaxPos: 40960}, a)
	for _, bad := range []string{"hidden_size=4096", "hidden_size=x", "=3", filepath.Join(t.TempDir(), "none.json")} {
		_, err := ReadSourceArch(bad)
		require.Error(t, err, bad)
	}
	_, err = ReadSourceArch("hidden_size=4096")
	require.ErrorContains(t, err, "num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size must be positive")
}

// TestFullSizeRatios serves the example checkpoints (real compressed-
// tensors layouts of the tiny model) as full-size Qwen3-8B and checks the
// serve-speed and memory ratios against BF16 with the roofline formula
// computed here from Qwen3-8B's shapes and each format's nominal storage
// at full size: BF16 2 bytes a parameter; FP8 1 plus an F32 scale per
// output channel; INT4 group 32 half a byte plus a BF16 scale per 32;
// NVFP4 half a byte plus an FP8 scale per 16; embeddings and lm_head BF16
// (the quantization's ignore list), norms BF16. The engine measures each
// role's bytes per parameter at the tiny model's width, where a per-channel
// scale weighs 16 times more than at 4096, hence a 1.5% tolerance.
func TestFullSizeRatios(t *testing.T) {
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	full, err := ReadSourceArch(qwen3_8B)
	require.NoError(t, err)

	// Qwen3-8B's parameters by kind, from its shapes.
	const (
		h, l, vocab, inter = 4096.0, 36.0, 151936.0, 12288.0
		qDim, kvDim        = 32 * 128.0, 8 * 128.0
	)
	embed := vocab * h
	attn := l * (qDim*h + 2*kvDim*h + h*qDim)
	mlp := l * 3 * inter * h
	norms := l*(2*h+2*128) + h
	require.InDelta(t, 8.19e9, 2*embed+attn+mlp+norms, 0.01e9, "Qwen3-8B has 8.19B parameters")
	// linearRows are the output rows of the linear matrices: FP8 stores
	// one F32 scale for each.
	linearRows := l * (qDim + 2*kvDim + h + 2*inter + h)
	weights := map[string]float64{
		"bf16-reference": 2 * (2*embed + attn + mlp + norms),
		"fp8-w8a8":       2*(2*embed+norms) + (attn + mlp) + 4*linearRows,
		"int4-w4a16-g32": 2*(2*embed+norms) + (attn+mlp)*(0.5+2.0/32),
		"nvfp4-w4a4":     2*(2*embed+norms) + (attn+mlp)*(0.5+1.0/16),
	}
	kvPerToken := map[string]float64{"bf16-reference": 2 * l * kvDim * 2, "fp8-w8a8": 2 * l * kvDim, "int4-w4a16-g32": 2 * l * kvDim, "nvfp4-w4a4": 2 * l * kvDim}
	kvDType := map[string]string{"bf16-reference": "auto", "fp8-w8a8": "fp8", "int4-w4a16-g32": "fp8", "nvfp4-w4a4": "fp8"}
	const (
		batch    = 32
		resident = batch * (128 + 32) // serve: 128-token prompts, 32 tokens in
		overhead = 0.5e-3
	)
	gpu := GPUs["h200"]
	params := embed + attn + mlp + norms // lm_head, projections, norms: embeddings are a gather
	step := func(name string) float64 {
		mem := (weights[name] + kvPerToken[name]*resident) / gpu.Bandwidth
		return max(mem, 2*params*batch/gpu.FLOPS) + overhead
	}
	memory := func(name string) float64 { return weights[name] + OtherBytes + kvPerToken[name]*resident }

	plans := map[string]Plan{}
	for name := range weights {
		ck := filepath.Join(dir, examples.SubmissionsDir, name)
		m, err := LoadCheckpoint(ck)
		require.NoError(t, err, name)
		fs, err := FullSizeOf(ck, m, full)
		require.NoError(t, err, name)
		p, err := NewPlan(PlanInput{GPU: gpu, Config: ModelConfig{Layers: full.Layers, KVHeads: full.KVHeads, HeadDim: full.HeadDim, MaxPos: full.MaxPos},
			Weights: fs.Weights, KVDType: kvDType[name], StepOverhead: overhead * 1e9})
		require.NoError(t, err, name)
		require.InEpsilon(t, weights[name], p.WeightsBytes, 0.015, name)
		require.Equal(t, kvPerToken[name], p.KVBytesPerToken, name)
		plans[name] = p
	}
	require.InEpsilon(t, 2*(2*embed+attn+mlp+norms), plans["bf16-reference"].WeightsBytes, 1e-9, "BF16 weights are exact")
	for _, name := range []string{"fp8-w8a8", "int4-w4a16-g32", "nvfp4-w4a4"} {
		t.Run(name, func(t *testing.T) {
			bf, q := plans["bf16-reference"], plans[name]
			speed := bf.StepTime(batch, resident, 0).Seconds() / q.StepTime(batch, resident, 0).Seconds()
			require.InEpsilon(t, step("bf16-reference")/step(name), speed, 0.015)
			mem := (bf.WeightsBytes + bf.OtherBytes + bf.KVBytesPerToken*resident) / (q.WeightsBytes + q.OtherBytes + q.KVBytesPerToken*resident)
			require.InEpsilon(t, memory("bf16-reference")/memory(name), mem, 0.015)
			t.Logf("%s: serve %.2fx BF16 (formula %.2fx), memory %.2fx (formula %.2fx)", name, speed, step("bf16-reference")/step(name), mem, memory("bf16-reference")/memory(name))
		})
	}
}

// TestProcessSourceConfig starts the simengine process on the example INT4
// checkpoint as the example campaign does, and checks the weights its
// memory report gives are the full-size ones FullSizeOf computes, and that
// a bad --source-config or a checkpoint without the shapes to measure by
// ends the process with a sentence that says what to fix.
func TestProcessSourceConfig(t *testing.T) {
	dir := t.TempDir()
	_, err := examples.Write(dir)
	require.NoError(t, err)
	int4 := filepath.Join(dir, examples.SubmissionsDir, "int4-w4a16-g32")
	full, err := ReadSourceArch(qwen3_8B)
	require.NoError(t, err)
	m, err := LoadCheckpoint(int4)
	require.NoError(t, err)
	want, err := FullSizeOf(int4, m, full)
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		dir     string
		source  string
		exit    int
		wantLog string
	}{
		{"serves full size", int4, qwen3_8B, 0, "full-size source model (hidden 4096, 36 layers, 32/8 heads, vocab 151936)"},
		{"bad source config", int4, "hidden_size=4096,num_hidden_layers=x", 2, `--source-config: source config: num_hidden_layers="x" is not an integer`},
		{"checkpoint without shapes", tinyCheckpoint(t), qwen3_8B, 1, "checkpoint config: intermediate_size, vocab_size must be positive integers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := start(t, tc.dir, "--source-config", tc.source, "--kv-cache-dtype", "fp8")
			if tc.exit != 0 {
				require.Equal(t, tc.exit, p.wait(t, 5*time.Second), "stderr:\n%s", p.stderr.String())
				require.Contains(t, p.stderr.String(), tc.wantLog)
				return
			}
			var rep MemoryReport
			require.Eventually(t, func() bool {
				resp, err := http.Get(p.url + "/v1/lowbarena/memory")
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&rep) == nil
			}, 5*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr.String())
			require.Equal(t, int64(want.Weights.Bytes), rep.WeightsBytes)
			require.Contains(t, p.stderr.String(), tc.wantLog)
			require.Contains(t, p.stderr.String(), "GPU KV cache size:")
		})
	}
}
