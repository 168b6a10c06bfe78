package analyze_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// moe30B is the source layout of a Qwen3-30B-A3B-style MoE (48 layers of
// 128 experts, hidden 2048, expert intermediate 768, 32 query and 4
// key/value heads of 128, vocabulary 151936): 18,867 tensors, 18,432 of
// them expert projections.
func moe30B() model {
	const layers, experts, hidden, inter, vocab, q, kv = 48, 128, 2048, 768, 151936, 32 * 128, 4 * 128
	m := model{src: &analyze.TensorIndex{Tensors: map[string]analyze.SourceTensor{}}, layers: layers}
	add := func(name string, shape ...int64) {
		m.src.Tensors[name] = analyze.SourceTensor{DType: "BF16", Shape: shape}
	}
	lin := func(name string, out, in int64) {
		add(name, out, in)
		m.decoder = append(m.decoder, name)
	}
	add("model.embed_tokens.weight", vocab, hidden)
	add("model.norm.weight", hidden)
	add("lm_head.weight", vocab, hidden)
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", hidden)
		add(p+"post_attention_layernorm.weight", hidden)
		add(p+"self_attn.q_norm.weight", 128)
		add(p+"self_attn.k_norm.weight", 128)
		lin(p+"self_attn.q_proj.weight", q, hidden)
		lin(p+"self_attn.k_proj.weight", kv, hidden)
		lin(p+"self_attn.v_proj.weight", kv, hidden)
		lin(p+"self_attn.o_proj.weight", hidden, q)
		add(p+"mlp.gate.weight", experts, hidden)
		for e := range experts {
			x := fmt.Sprintf("%smlp.experts.%d.", p, e)
			lin(x+"gate_proj.weight", inter, hidden)
			lin(x+"up_proj.weight", inter, hidden)
			lin(x+"down_proj.weight", hidden, inter)
		}
	}
	return m
}

// BenchmarkAnalyzeMoE30B: the whole analysis of a GPTQModel 4-bit
// checkpoint of moe30B (75,651 tensors; its headers read once, outside
// the timer), with a dynamic map of two regular expressions and lm_head
// and the routers left out.
func BenchmarkAnalyzeMoE30B(b *testing.B) {
	m := moe30B()
	bl := write(m, m.decoderOnly, gptqWriter(4, 128, safetensors.I32))
	ck := bl.checkpoint(b, true)
	qc := gptqModelConfig(4, 128, "int32", map[string]any{`+:.*down_proj`: map[string]any{"bits": 4}, `-:.*mlp\.gate$`: map[string]any{}})
	in := analyze.Input{Config: m.config(b, qc), Checkpoint: ck, Source: analyze.Source{Config: m.config(b, nil), Tensors: m.src},
		Declared: "W4A16KV16"}
	got, err := analyze.Analyze(in)
	require.NoError(b, err)
	require.True(b, got.OK, "%v", got.Violations)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := analyze.Analyze(in); err != nil {
			b.Fatal(err)
		}
	}
}
