package analyze_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// arch is a small model of a campaign's family, enough to hold every kind of
// tensor the real one has.
type arch struct {
	prefix               string // "model." or "model.language_model."
	layers               int
	linearAttn           []int // layers with Qwen3.5 gated delta-net attention
	hidden, inter, vocab int64
	heads, kvHeads, head int64
	extras               bool // a vision tower and an MTP head
}

var (
	// qwen3Small is a tiny Qwen3 (the 8B fixture's family).
	qwen3Small = arch{prefix: "model.", layers: 2, hidden: 64, inter: 128, vocab: 256, heads: 4, kvHeads: 2, head: 16}
	// qwen35Small is a tiny Qwen3.5 (the 27B fixture's family).
	qwen35Small = arch{prefix: "model.language_model.", layers: 4, linearAttn: []int{0, 1, 2}, hidden: 64, inter: 128,
		vocab: 256, heads: 4, kvHeads: 2, head: 16, extras: true}
)

// source returns the arch's BF16 tensor index.
func (a arch) source() *analyze.TensorIndex {
	x := &analyze.TensorIndex{Tensors: map[string]analyze.SourceTensor{}}
	add := func(name string, shape ...int64) {
		x.Tensors[name] = analyze.SourceTensor{DType: "BF16", Shape: shape}
	}
	add(a.prefix+"embed_tokens.weight", a.vocab, a.hidden)
	add(a.prefix+"norm.weight", a.hidden)
	add("lm_head.weight", a.vocab, a.hidden)
	for l := range a.layers {
		p := fmt.Sprintf("%slayers.%d.", a.prefix, l)
		add(p+"input_layernorm.weight", a.hidden)
		add(p+"post_attention_layernorm.weight", a.hidden)
		add(p+"mlp.gate_proj.weight", a.inter, a.hidden)
		add(p+"mlp.up_proj.weight", a.inter, a.hidden)
		add(p+"mlp.down_proj.weight", a.hidden, a.inter)
		if slices.Contains(a.linearAttn, l) {
			add(p+"linear_attn.in_proj_qkvz.weight", 4*a.hidden, a.hidden)
			add(p+"linear_attn.in_proj_a.weight", a.heads, a.hidden)
			add(p+"linear_attn.in_proj_b.weight", a.heads, a.hidden)
			add(p+"linear_attn.conv1d.weight", 2*a.hidden, 1, 4)
			add(p+"linear_attn.out_proj.weight", a.hidden, a.hidden)
			add(p+"linear_attn.norm.weight", a.head)
			continue
		}
		add(p+"self_attn.q_proj.weight", a.heads*a.head, a.hidden)
		add(p+"self_attn.k_proj.weight", a.kvHeads*a.head, a.hidden)
		add(p+"self_attn.v_proj.weight", a.kvHeads*a.head, a.hidden)
		add(p+"self_attn.o_proj.weight", a.hidden, a.heads*a.head)
		add(p+"self_attn.q_norm.weight", a.head)
		add(p+"self_attn.k_norm.weight", a.head)
	}
	if a.extras {
		add("model.visual.blocks.0.attn.qkv.weight", 3*a.hidden, a.hidden)
		add("model.visual.blocks.0.attn.qkv.bias", 3*a.hidden)
		add("mtp.fc.weight", a.hidden, 2*a.hidden)
	}
	return x
}

// form is how a linear weight is stored.
type form string

const (
	formBF16  form = "bf16"
	formInt4  form = "int4"  // compressed-tensors pack-quantized W4A16, group 32
	formNVFP4 form = "nvfp4" // compressed-tensors NVFP4
	formMONV  form = "modelopt-nvfp4"
	formFP8   form = "fp8" // channel-wise FP8 with a static input scale
)

// checkpoint is a quantized checkpoint under construction.
type checkpoint struct {
	tensors []safetensors.Tensor
}

func (c *checkpoint) add(name string, dt safetensors.DType, shape ...int64) {
	c.tensors = append(c.tensors, safetensors.Tensor{Name: name, DType: dt, Shape: shape})
}

// drop removes a tensor.
func (c *checkpoint) drop(name string) {
	c.tensors = slices.DeleteFunc(c.tensors, func(t safetensors.Tensor) bool { return t.Name == name })
}

// quantize stores the source's rank-2 *.weight tensors, other than
// embeddings and those keep says to keep, in the given form; every other
// tensor stays BF16.
func quantize(src *analyze.TensorIndex, f form, keep func(name string) bool) *checkpoint {
	c := &checkpoint{}
	for _, name := range src.Names() {
		st := src.Tensors[name]
		m, isWeight := strings.CutSuffix(name, ".weight")
		linear := isWeight && len(st.Shape) == 2 && !strings.Contains(name, "embed") && (keep == nil || !keep(name))
		if !linear || f == formBF16 {
			c.add(name, safetensors.BF16, st.Shape...)
			continue
		}
		out, in := st.Shape[0], st.Shape[1]
		switch f {
		case formInt4:
			c.add(m+".weight_packed", safetensors.I32, out, in/8)
			c.add(m+".weight_scale", safetensors.BF16, out, in/32)
			c.add(m+".weight_shape", safetensors.I64, 2)
		case formNVFP4:
			c.add(m+".weight_packed", safetensors.U8, out, in/2)
			c.add(m+".weight_scale", safetensors.F8E4M3, out, in/16)
			c.add(m+".weight_global_scale", safetensors.F32, 1)
			c.add(m+".input_global_scale", safetensors.F32, 1)
		case formMONV:
			c.add(m+".weight", safetensors.U8, out, in/2)
			c.add(m+".weight_scale", safetensors.F8E4M3, out, in/16)
			c.add(m+".weight_scale_2", safetensors.F32)
			c.add(m+".input_scale", safetensors.F32)
		case formFP8:
			c.add(m+".weight", safetensors.F8E4M3, out, in)
			c.add(m+".weight_scale", safetensors.F32, out, 1)
			c.add(m+".input_scale", safetensors.F32)
		}
	}
	return c
}

// write writes the checkpoint, sparse, as shards of about two tensors in
// three with an index when sharded, and reads its headers back.
func (c *checkpoint) write(t testing.TB, sharded bool) *safetensors.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	if !sharded {
		var w safetensors.Writer
		for _, ts := range c.tensors {
			require.NoError(t, w.Add(ts))
		}
		_, err := w.WriteFile(filepath.Join(dir, "model.safetensors"))
		require.NoError(t, err)
	} else {
		var w1, w2 safetensors.Writer
		wm := map[string]string{}
		for i, ts := range c.tensors {
			w, name := &w1, "model-00001-of-00002.safetensors"
			if i%3 == 2 {
				w, name = &w2, "model-00002-of-00002.safetensors"
			}
			require.NoError(t, w.Add(ts))
			wm[ts.Name] = name
		}
		_, err := w1.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"))
		require.NoError(t, err)
		_, err = w2.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		require.NoError(t, err)
		data, err := json.Marshal(map[string]any{"weight_map": wm})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, safetensors.IndexFile), data, 0o600))
	}
	ck, err := safetensors.ReadCheckpoint(dir)
	require.NoError(t, err)
	return ck
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// jsonOf marshals v and decodes it back into generic JSON values.
func jsonOf(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(data, &out))
	return out
}
