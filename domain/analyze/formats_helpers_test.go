package analyze_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/schemas"
)

// The golden tests of the formats (ct_test.go, gptq_test.go, ...) write
// header-only checkpoints whose tensor names, dtypes and shapes follow each
// tool's own writer, and compare the contract with values the test derives
// on its own: the expected bits per weight are the bytes the test's writer
// stored for the decoder linears (their values and weight companions)
// over the source elements of the decoder linears, which the test lists
// from the architecture, not from the analysis.

// model is a small source model: its BF16 tensor index and the weights the
// test knows to be its decoder linears (attention, MLP and expert
// projections).
type model struct {
	src     *analyze.TensorIndex
	decoder []string
	// layers is its num_hidden_layers.
	layers int
}

// config is a config.json of the model carrying a quantization_config
// (none when nil).
func (m model) config(t testing.TB, qc map[string]any) []byte {
	t.Helper()
	return qwen3Config(t, qc, map[string]any{"num_hidden_layers": m.layers})
}

// model returns an arch's source and its decoder linears: per layer the
// four attention projections (or Qwen3.5's linear-attention projections)
// and the three MLP projections.
func (a arch) model() model {
	m := model{src: a.source(), layers: a.layers}
	for l := range a.layers {
		p := fmt.Sprintf("%slayers.%d.", a.prefix, l)
		attn := []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"}
		if slices.Contains(a.linearAttn, l) {
			attn = []string{"linear_attn.in_proj_qkvz", "linear_attn.in_proj_a", "linear_attn.in_proj_b", "linear_attn.out_proj"}
		}
		for _, s := range append(attn, "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj") {
			m.decoder = append(m.decoder, p+s+".weight")
		}
	}
	return m
}

// deepseekSmall is a tiny DeepSeek-V3 (modeling_deepseek.py's names):
// multi-head latent attention (q_a_proj, q_a_layernorm, q_b_proj,
// kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), a dense MLP in
// layer 0, and in layer 1 a MoE of two routed experts, shared experts and
// the router mlp.gate with its F32 e_score_correction_bias.
func deepseekSmall() model {
	const (
		hidden, vocab, inter, moeInter, experts = 64, 256, 128, 32, 2
		heads, qLora, kvLora, nope, rope, vDim  = 2, 32, 32, 16, 16, 16
	)
	m := model{src: &analyze.TensorIndex{Tensors: map[string]analyze.SourceTensor{}}, layers: 2}
	add := func(name, dt string, shape ...int64) {
		m.src.Tensors[name] = analyze.SourceTensor{DType: dt, Shape: shape}
	}
	lin := func(name string, out, in int64) {
		add(name, "BF16", out, in)
		m.decoder = append(m.decoder, name)
	}
	add("model.embed_tokens.weight", "BF16", vocab, hidden)
	add("model.norm.weight", "BF16", hidden)
	add("lm_head.weight", "BF16", vocab, hidden)
	for l := range 2 {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", "BF16", hidden)
		add(p+"post_attention_layernorm.weight", "BF16", hidden)
		add(p+"self_attn.q_a_layernorm.weight", "BF16", qLora)
		add(p+"self_attn.kv_a_layernorm.weight", "BF16", kvLora)
		lin(p+"self_attn.q_a_proj.weight", qLora, hidden)
		lin(p+"self_attn.q_b_proj.weight", heads*(nope+rope), qLora)
		lin(p+"self_attn.kv_a_proj_with_mqa.weight", kvLora+rope, hidden)
		lin(p+"self_attn.kv_b_proj.weight", heads*(nope+vDim), kvLora)
		lin(p+"self_attn.o_proj.weight", hidden, heads*vDim)
		if l == 0 {
			lin(p+"mlp.gate_proj.weight", inter, hidden)
			lin(p+"mlp.up_proj.weight", inter, hidden)
			lin(p+"mlp.down_proj.weight", hidden, inter)
			continue
		}
		add(p+"mlp.gate.weight", "BF16", experts, hidden)
		add(p+"mlp.gate.e_score_correction_bias", "F32", experts)
		for e := range experts {
			q := fmt.Sprintf("%smlp.experts.%d.", p, e)
			lin(q+"gate_proj.weight", moeInter, hidden)
			lin(q+"up_proj.weight", moeInter, hidden)
			lin(q+"down_proj.weight", hidden, moeInter)
		}
		lin(p+"mlp.shared_experts.gate_proj.weight", moeInter, hidden)
		lin(p+"mlp.shared_experts.up_proj.weight", moeInter, hidden)
		lin(p+"mlp.shared_experts.down_proj.weight", hidden, moeInter)
	}
	return m
}

// gptOSSSmall is a tiny gpt-oss in its BF16 form (transformers'
// modeling_gpt_oss.py): attention with biases and sinks, the router with a
// bias, and each layer's experts fused, mlp.experts.gate_up_proj [E,
// hidden, 2·inter] and mlp.experts.down_proj [E, inter, hidden], with
// their biases.
func gptOSSSmall() model {
	const hidden, vocab, inter, experts, heads, kvHeads, head = 64, 256, 64, 4, 4, 2, 16
	m := model{src: &analyze.TensorIndex{Tensors: map[string]analyze.SourceTensor{}}, layers: 2}
	add := func(name string, shape ...int64) {
		m.src.Tensors[name] = analyze.SourceTensor{DType: "BF16", Shape: shape}
	}
	add("model.embed_tokens.weight", vocab, hidden)
	add("model.norm.weight", hidden)
	add("lm_head.weight", vocab, hidden)
	for l := range 2 {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", hidden)
		add(p+"post_attention_layernorm.weight", hidden)
		for _, s := range []struct {
			name    string
			out, in int64
		}{{"q_proj", heads * head, hidden}, {"k_proj", kvHeads * head, hidden}, {"v_proj", kvHeads * head, hidden}, {"o_proj", hidden, heads * head}} {
			add(p+"self_attn."+s.name+".weight", s.out, s.in)
			add(p+"self_attn."+s.name+".bias", s.out)
			m.decoder = append(m.decoder, p+"self_attn."+s.name+".weight")
		}
		add(p+"self_attn.sinks", heads)
		add(p+"mlp.router.weight", experts, hidden)
		add(p+"mlp.router.bias", experts)
		add(p+"mlp.experts.gate_up_proj", experts, hidden, 2*inter)
		add(p+"mlp.experts.gate_up_proj_bias", experts, 2*inter)
		add(p+"mlp.experts.down_proj", experts, inter, hidden)
		add(p+"mlp.experts.down_proj_bias", experts, hidden)
		m.decoder = append(m.decoder, p+"mlp.experts.gate_up_proj", p+"mlp.experts.down_proj")
	}
	return m
}

// build is a checkpoint under construction that remembers the bytes its
// writer stored for each source weight: its values and its weight
// companions.
type build struct {
	tensors []safetensors.Tensor
	weight  map[string]int64
	total   int64
}

// bytesOf is a tensor's size in the data section.
func bytesOf(dt safetensors.DType, shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return (n*dt.Bits() + 7) / 8
}

// add writes a tensor that belongs to no source weight's bytes.
func (b *build) add(name string, dt safetensors.DType, shape ...int64) {
	b.tensors = append(b.tensors, safetensors.Tensor{Name: name, DType: dt, Shape: shape})
	b.total += bytesOf(dt, shape)
}

// part writes a tensor that holds part of a source weight: its values or a
// weight companion.
func (b *build) part(of, name string, dt safetensors.DType, shape ...int64) {
	b.add(name, dt, shape...)
	if b.weight == nil {
		b.weight = map[string]int64{}
	}
	b.weight[of] += bytesOf(dt, shape)
}

// writer stores one source weight the way a tool does.
type writer func(b *build, name string, shape []int64)

// write builds a checkpoint of m: the source weights quantize selects go
// through w, every other tensor is stored as the source has it.
func write(m model, quantize func(name string) bool, w writer) *build {
	b := &build{}
	for _, name := range m.src.Names() {
		st := m.src.Tensors[name]
		if quantize(name) {
			w(b, name, st.Shape)
			continue
		}
		b.part(name, name, safetensors.DType(st.DType), st.Shape...)
	}
	return b
}

// decoderOnly quantizes the decoder linears of m.
func (m model) decoderOnly(name string) bool { return slices.Contains(m.decoder, name) }

// bpw is what the test expects of bits_per_weight: the bytes stored for
// the decoder linears over their source elements.
func (b *build) bpw(m model) float64 {
	var stored, n int64
	for _, d := range m.decoder {
		stored += b.weight[d]
		n += m.src.Tensors[d].NumElements()
	}
	return 8 * float64(stored) / float64(n)
}

// modelBPW is what the test expects of model_bits_per_weight.
func (b *build) modelBPW(m model) float64 {
	var n int64
	for _, t := range m.src.Tensors {
		n += t.NumElements()
	}
	return 8 * float64(b.total) / float64(n)
}

// checkpoint writes the build, sparse, in one file, or in two shards with
// an index, and reads its headers back; extra files (hf_quant_config.json)
// are not the reader's concern.
func (b *build) checkpoint(t testing.TB, sharded bool) *safetensors.Checkpoint {
	t.Helper()
	c := &checkpoint{tensors: b.tensors}
	return c.write(t, sharded)
}

// module is a source weight's module.
func module(name string) string { return strings.TrimSuffix(name, ".weight") }

// formatCase is one golden case of a tool's format.
type formatCase struct {
	name string
	m    model
	// qc is config.json's quantization_config; hf is hf_quant_config.json
	// (nil when the checkpoint has none).
	qc, hf map[string]any
	// quantize selects the source weights the tool quantizes; the decoder
	// linears when nil.
	quantize func(name string) bool
	w        writer
	// extra adds tensors a tool writes beside the weights (KV scales).
	extra func(b *build)
	// kv is the engine's KV cache dtype; label the detected label, which
	// the case also declares; format the quantization block's format.
	kv, label, format string
	kvBits            *int
}

// analyzeFormat writes the case's checkpoint and checks what every honest
// format must read: kept, the label declared, bits per weight and model
// bits per weight as the test's writer stored them, no foreign tensor.
func analyzeFormat(t *testing.T, tc formatCase) (record.Contract, *build) {
	t.Helper()
	q := tc.quantize
	if q == nil {
		q = tc.m.decoderOnly
	}
	b := write(tc.m, q, tc.w)
	if tc.extra != nil {
		tc.extra(b)
	}
	in := analyze.Input{
		Config:       tc.m.config(t, tc.qc),
		Checkpoint:   b.checkpoint(t, true),
		Source:       analyze.Source{Config: tc.m.config(t, nil), Tensors: tc.m.src},
		Declared:     tc.label,
		KVCacheDType: tc.kv,
	}
	if tc.hf != nil {
		data, err := json.Marshal(tc.hf)
		require.NoError(t, err)
		in.HFQuantConfig = data
	}
	got, err := analyze.Analyze(in)
	require.NoError(t, err)
	require.Empty(t, got.Violations)
	require.True(t, got.OK)
	require.Equal(t, tc.label, got.DetectedPrecision)
	require.Equal(t, tc.format, got.Format)
	require.Equal(t, tc.kvBits, got.KVBits)
	require.InDelta(t, b.bpw(tc.m), got.BitsPerWeight, 1e-9)
	require.InDelta(t, b.modelBPW(tc.m), got.ModelBitsPerWeight, 1e-9)
	require.Zero(t, got.ForeignTensors.Count, "%v", got.ForeignTensors.Largest)

	// The event that carries it is valid, unquantized modules included.
	validator, err := schemas.Default()
	require.NoError(t, err)
	payload, err := json.Marshal(map[string]any{"submission_id": "sub-1", "contract": got, "detected_precision": got.DetectedPrecision})
	require.NoError(t, err)
	require.NoError(t, validator.Validate("dev.lowbarena.contract.completed.v1", payload))
	return got, b
}

// kvScales adds compressed-tensors' per-layer KV cache scales,
// self_attn.k_scale and self_attn.v_scale ([1], the weight's dtype).
func kvScales(layers int, prefix string, dt safetensors.DType, shape ...int64) func(b *build) {
	return func(b *build) {
		for l := range layers {
			for _, s := range []string{"k_scale", "v_scale"} {
				b.add(fmt.Sprintf("%slayers.%d.self_attn.%s", prefix, l, s), dt, shape...)
			}
		}
	}
}

func ceil(a, b int64) int64 { return (a + b - 1) / b }

// analyzeBuild analyzes a build of m under a quantization_config,
// declaring a label, the engine's KV cache dtype unknown.
func analyzeBuild(t *testing.T, m model, b *build, qc map[string]any, declared string) record.Contract {
	t.Helper()
	got, err := analyze.Analyze(analyze.Input{
		Config:     m.config(t, qc),
		Checkpoint: b.checkpoint(t, false),
		Source:     analyze.Source{Config: m.config(t, nil), Tensors: m.src},
		Declared:   declared,
	})
	require.NoError(t, err)
	return got
}

// codes lists a contract's violation codes in order.
func codes(c record.Contract) []string {
	out := []string{}
	for _, v := range c.Violations {
		out = append(out, v.Code)
	}
	return out
}
