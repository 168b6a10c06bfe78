package analyze_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/events/reason"
)

// qwen3Config returns a Qwen3 config.json with the given
// quantization_config (none when nil) and overrides.
func qwen3Config(t testing.TB, qc map[string]any, over map[string]any) []byte {
	t.Helper()
	cfg := map[string]any{
		"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3", "hidden_size": 64,
		"num_hidden_layers": 2, "rope_theta": 1000000, "rope_scaling": nil, "tie_word_embeddings": false,
	}
	if qc != nil {
		cfg["quantization_config"] = qc
	}
	maps.Copy(cfg, over)
	data, err := json.Marshal(cfg)
	require.NoError(t, err)
	return data
}

func ctNVFP4() map[string]any {
	args := func(dynamic any) map[string]any {
		return map[string]any{"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true, "dynamic": dynamic, "observer": "minmax"}
	}
	return map[string]any{
		"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
		"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"}, "weights": args(false), "input_activations": args("local")}},
		"ignore":        []string{"lm_head"},
	}
}

func ctFP8Dynamic() map[string]any {
	return map[string]any{
		"quant_method": "compressed-tensors", "format": "float-quantized",
		"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"},
			"weights":           map[string]any{"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false},
			"input_activations": map[string]any{"num_bits": 8, "type": "float", "strategy": "token", "symmetric": true, "dynamic": true}}},
		"ignore": []string{"lm_head"},
	}
}

func keepHead(name string) bool { return name == "lm_head.weight" }

// honest is an NVFP4 W4A4 checkpoint that keeps its promise.
func honest(t *testing.T) (analyze.Input, *checkpoint) {
	src := qwen3Small.source()
	c := quantize(src, formNVFP4, keepHead)
	return analyze.Input{
		Config:       qwen3Config(t, ctNVFP4(), nil),
		Checkpoint:   c.write(t, false),
		Source:       analyze.Source{Config: qwen3Config(t, nil, nil), Tensors: src},
		Declared:     "W4A4KV8",
		KVCacheDType: "fp8",
	}, c
}

func TestAnalyzeHonest(t *testing.T) {
	t.Parallel()
	in, _ := honest(t)
	c, err := analyze.Analyze(in)
	require.NoError(t, err)
	require.True(t, c.OK, "%v", c.Violations)
	require.Empty(t, c.Violations)
	require.Equal(t, "W4A4KV8", c.DetectedPrecision)
	require.Equal(t, "w4a4", c.Format)
	require.NotNil(t, c.Quantization.Activations)
	require.True(t, c.Quantization.Activations.Dynamic, `"dynamic": "local" reads as dynamic`)
	require.Equal(t, []string{"lm_head"}, c.Quantization.Ignore)
	// 4 bits + an FP8 scale per 16 + two F32 global scales per module.
	require.InDelta(t, 4.5, c.BitsPerWeight, 0.05)
	require.Greater(t, c.ModelBitsPerWeight, c.BitsPerWeight, "embeddings and head stay BF16")
	require.Zero(t, c.ForeignTensors.Count)
}

func TestAnalyzeViolations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(t *testing.T, in *analyze.Input, c *checkpoint)
		codes  []string
	}{
		{"rope theta changed", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			in.Config = qwen3Config(t, ctNVFP4(), map[string]any{"rope_theta": 2000000})
		}, []string{string(reason.RopeChanged)}},
		{"rope scaling added", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			in.Config = qwen3Config(t, ctNVFP4(), map[string]any{"rope_scaling": map[string]any{"rope_type": "yarn", "factor": 4}})
		}, []string{string(reason.RopeChanged)}},
		{"foreign tensor over the share", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			c.add("model.layers.0.mlp.adapter.lora_A.weight", safetensors.BF16, 128, 64)
			in.Checkpoint = c.write(t, false)
		}, []string{string(reason.ForeignTensors)}},
		{"foreign scale on a module the source lacks", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			c.add("model.layers.0.mlp.extra.weight_scale", safetensors.F32, 4096)
			in.Checkpoint = c.write(t, false)
		}, []string{string(reason.ForeignTensors)}},
		{"declared KV narrower than the engine runs", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			in.Declared = "W4A4KV4"
		}, []string{string(reason.PrecisionWiderThanDeclared)}},
		{"declares W4 but stores BF16", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			in.Checkpoint = quantize(in.Source.Tensors, formBF16, nil).write(t, false)
		}, []string{string(reason.PrecisionWiderThanDeclared)}},
		{"declares W4 without a quantization config", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			in.Config = qwen3Config(t, nil, nil)
			in.Checkpoint = quantize(in.Source.Tensors, formBF16, nil).write(t, false)
		}, []string{string(reason.PrecisionWiderThanDeclared)}},
		{"sparse not allowed", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			qc := ctNVFP4()
			qc["sparsity_config"] = map[string]any{"format": "sparse-24-bitmask", "sparsity_structure": "2:4"}
			in.Config = qwen3Config(t, qc, nil)
		}, []string{string(reason.SparseWeights)}},
		{"sparse allowed", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			qc := ctNVFP4()
			qc["sparsity_config"] = map[string]any{"format": "sparse-24-bitmask"}
			in.Config = qwen3Config(t, qc, nil)
			in.Policy.AllowSparse = true
		}, nil},
		{"source tensor missing", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			c.drop("model.layers.1.input_layernorm.weight")
			in.Checkpoint = c.write(t, false)
		}, []string{string(reason.ShapeMismatch)}},
		{"packed weight of the wrong shape", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			c.drop("model.layers.0.mlp.up_proj.weight_packed")
			c.add("model.layers.0.mlp.up_proj.weight_packed", safetensors.U8, 128, 16)
			in.Checkpoint = c.write(t, false)
		}, []string{string(reason.ShapeMismatch)}},
		{"widened layer", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			c.drop("model.norm.weight")
			c.add("model.norm.weight", safetensors.BF16, 128)
			in.Checkpoint = c.write(t, false)
		}, []string{string(reason.ShapeMismatch)}},
		{"lm_head missing without tied embeddings", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			c.drop("lm_head.weight")
			in.Checkpoint = c.write(t, false)
		}, []string{string(reason.ShapeMismatch)}},
		{"lm_head missing with tied embeddings", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			c.drop("lm_head.weight")
			in.Config = qwen3Config(t, ctNVFP4(), map[string]any{"tie_word_embeddings": true})
			in.Checkpoint = c.write(t, false)
		}, nil},
		{"bytes outside every tensor", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			dir := t.TempDir()
			var w safetensors.Writer
			for _, ts := range c.tensors {
				require.NoError(t, w.Add(ts))
			}
			path := filepath.Join(dir, "model.safetensors")
			size, err := w.WriteFile(path)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(path, size+1024))
			in.Checkpoint, err = safetensors.ReadCheckpoint(dir)
			require.NoError(t, err)
		}, []string{string(reason.UnaccountedBytes)}},
		{"several at once", func(t *testing.T, in *analyze.Input, c *checkpoint) {
			in.Config = qwen3Config(t, ctNVFP4(), map[string]any{"rope_theta": 5})
			in.Declared = "W4A4KV4"
			c.add("payload", safetensors.U8, 1<<20)
			in.Checkpoint = c.write(t, true)
		}, []string{string(reason.RopeChanged), string(reason.ForeignTensors), string(reason.PrecisionWiderThanDeclared)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in, c := honest(t)
			tt.mutate(t, &in, c)
			got, err := analyze.Analyze(in)
			require.NoError(t, err)
			var codes []string
			for _, v := range got.Violations {
				codes = append(codes, v.Code)
				require.NotEmpty(t, v.Message)
			}
			require.Equal(t, tt.codes, codes)
			require.Equal(t, len(tt.codes) == 0, got.OK)
		})
	}
}

func TestAnalyzeForeignTensors(t *testing.T) {
	t.Parallel()
	in, c := honest(t)
	c.add("tiny.extra", safetensors.F32)
	for i, n := range []int64{1, 2, 3, 4, 5, 6} {
		c.add("big."+string(rune('a'+i)), safetensors.U8, n)
	}
	c.add("model.layers.0.self_attn.k_scale", safetensors.F32) // allowed: KV scale on an attention module
	c.add("model.layers.0.self_attn.k_proj.v_scale", safetensors.F32)
	in.Checkpoint = c.write(t, false)
	got, err := analyze.Analyze(in)
	require.NoError(t, err)
	require.Equal(t, 7, got.ForeignTensors.Count)
	require.Equal(t, int64(4+21), got.ForeignTensors.Bytes)
	require.Len(t, got.ForeignTensors.Largest, 5)
	require.Equal(t, "big.f", got.ForeignTensors.Largest[0].Name)
	require.Equal(t, []int64{6}, got.ForeignTensors.Largest[0].Shape)
	require.Equal(t, "U8", got.ForeignTensors.Largest[0].DType)
	require.InDelta(t, float64(25)/float64(in.Checkpoint.TensorBytes()), got.ForeignTensors.Share, 1e-12)
	require.True(t, got.OK, "under the 0.1%% share: %v", got.Violations)

	in.Policy.ForeignShareLimit = 1e-9
	got, err = analyze.Analyze(in)
	require.NoError(t, err)
	require.False(t, got.OK)
}

func TestAnalyzeSchemes(t *testing.T) {
	t.Parallel()
	modelopt := map[string]any{"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16, "exclude_modules": []string{"lm_head"}}
	nested := map[string]any{"producer": map[string]any{"name": "modelopt"}, "quantization": map[string]any{"quant_algo": "FP8", "exclude_modules": []string{"lm_head"}}}
	hfFP8 := map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{128, 128}, "modules_to_not_convert": []string{"lm_head"}}
	embOnly := map[string]any{"quant_method": "compressed-tensors", "config_groups": map[string]any{"g": map[string]any{"targets": []string{"Embedding"},
		"weights": map[string]any{"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "symmetric": true}}}}
	tests := []struct {
		name    string
		qc      map[string]any
		form    form
		keep    func(string) bool
		kv      string
		label   string
		format  string
		kvBits  *int
		actions bool
	}{
		{"compressed-tensors NVFP4", ctNVFP4(), formNVFP4, keepHead, "fp8", "W4A4KV8", "w4a4", nil, true},
		{"compressed-tensors FP8 dynamic", ctFP8Dynamic(), formFP8, keepHead, "fp8", "W8A8KV8", "w8a8", nil, true},
		{"ModelOpt NVFP4", modelopt, formMONV, keepHead, "", "W4A4KV8", "w4a4", ptr(8), true},
		{"ModelOpt hf_quant_config layout FP8", nested, formFP8, keepHead, "auto", "W8A8KV16", "w8a8", nil, true},
		{"transformers fine-grained fp8", hfFP8, formFP8, keepHead, "fp8_e4m3", "W8A8KV8", "w8a8", nil, true},
		{"no quantization config, BF16", nil, formBF16, nil, "auto", "W16A16KV16", "bf16", nil, false},
		// Without a config, the tensors say it all.
		{"no quantization config, FP8 tensors", nil, formFP8, nil, "", "W8A16KV16", "unrecognized", nil, false},
		{"unknown method, NVFP4 tensors", map[string]any{"quant_method": "mystery"}, formMONV, nil, "nvfp4", "W4A16KV4", "unrecognized", nil, false},
		// lm_head is outside the label, listed or not.
		{"unknown method, BF16 head", map[string]any{"quant_method": "mystery"}, formMONV, keepHead, "nvfp4", "W4A16KV4", "unrecognized", nil, false},
		{"head left BF16 but not ignored", func() map[string]any { q := ctNVFP4(); delete(q, "ignore"); return q }(), formNVFP4, keepHead, "fp8", "W4A4KV8", "w4a4", nil, true},
		{"embedding-only group over BF16 linears", embOnly, formBF16, nil, "fp8", "W16A16KV8", "w4a16", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := qwen3Small.source()
			got, err := analyze.Analyze(analyze.Input{
				Config:       qwen3Config(t, tt.qc, nil),
				Checkpoint:   quantize(src, tt.form, tt.keep).write(t, true),
				Source:       analyze.Source{Config: qwen3Config(t, nil, nil), Tensors: src},
				KVCacheDType: tt.kv,
			})
			require.NoError(t, err)
			require.Equal(t, tt.label, got.DetectedPrecision)
			require.Empty(t, got.DeclaredPrecision)
			require.Equal(t, tt.format, got.Format)
			require.Equal(t, tt.kvBits, got.KVBits)
			require.Equal(t, tt.kvBits != nil, got.Quantization.KVQuantized)
			require.Equal(t, tt.actions, got.Quantization.Activations != nil)
			require.True(t, got.OK, "nothing declared, nothing broken: %v", got.Violations)
		})
	}
}

func ptr(v int) *int { return &v }

func TestAnalyzeKVFallsBackToConfig(t *testing.T) {
	t.Parallel()
	in, _ := honest(t)
	qc := ctNVFP4()
	qc["kv_cache_scheme"] = map[string]any{"num_bits": 8, "type": "float", "strategy": "tensor"}
	in.Config = qwen3Config(t, qc, nil)
	in.KVCacheDType = ""
	got, err := analyze.Analyze(in)
	require.NoError(t, err)
	require.Equal(t, "W4A4KV8", got.DetectedPrecision, "engine not known yet: the config's KV scheme")
	in.Config = qwen3Config(t, ctNVFP4(), nil)
	got, err = analyze.Analyze(in)
	require.NoError(t, err)
	require.Equal(t, "W4A4KV16", got.DetectedPrecision, "neither says: 16")
}

func TestAnalyzeRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(in *analyze.Input)
		code   analyze.Code
	}{
		{"config not JSON", func(in *analyze.Input) { in.Config = []byte(`{"a":`) }, reason.ConfigInvalid},
		{"config an array", func(in *analyze.Input) { in.Config = []byte(`[1]`) }, reason.ConfigInvalid},
		{"config null", func(in *analyze.Input) { in.Config = []byte(`null`) }, reason.ConfigInvalid},
		{"config with trailing data", func(in *analyze.Input) { in.Config = []byte(`{} {}`) }, reason.ConfigInvalid},
		{"config too large", func(in *analyze.Input) { in.Config = make([]byte, analyze.MaxConfigSize+1) }, reason.ConfigInvalid},
		{"source config not JSON", func(in *analyze.Input) { in.Source.Config = []byte(`nope`) }, reason.SourceInvalid},
		{"no source index", func(in *analyze.Input) { in.Source.Tensors = nil }, reason.SourceInvalid},
		{"source dtype unknown", func(in *analyze.Input) {
			in.Source.Tensors = &analyze.TensorIndex{Tensors: map[string]analyze.SourceTensor{"w": {DType: "Q4", Shape: []int64{1}}}}
		}, reason.SourceInvalid},
		{"declared label malformed", func(in *analyze.Input) { in.Declared = "W4A4" }, reason.LabelInvalid},
		{"declared label lower case", func(in *analyze.Input) { in.Declared = "w4a4kv8" }, reason.LabelInvalid},
		{"KV dtype unknown", func(in *analyze.Input) { in.KVCacheDType = "fp7" }, reason.KVDTypeUnknown},
		{"no checkpoint", func(in *analyze.Input) { in.Checkpoint = nil }, reason.CheckpointMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in, _ := honest(t)
			tt.mutate(&in)
			_, err := analyze.Analyze(in)
			require.Error(t, err)
			require.Equal(t, tt.code, analyze.CodeOf(err), "%v", err)
		})
	}
}

func TestParseTensorIndex(t *testing.T) {
	t.Parallel()
	x, err := analyze.ParseTensorIndex([]byte(`{"tensors":{"a.weight":{"dtype":"BF16","shape":[4,8]},"b":{"dtype":"F32","shape":[]}}}`))
	require.NoError(t, err)
	require.Equal(t, []string{"a.weight", "b"}, x.Names())
	require.Equal(t, int64(32), x.Tensors["a.weight"].NumElements())

	for name, data := range map[string]string{
		"not JSON":       `{`,
		"no tensors":     `{"tensors":{}}`,
		"unknown dtype":  `{"tensors":{"a":{"dtype":"Q4","shape":[1]}}}`,
		"negative dim":   `{"tensors":{"a":{"dtype":"BF16","shape":[-1]}}}`,
		"overflowing":    `{"tensors":{"a":{"dtype":"BF16","shape":[4294967296,4294967296,4]}}}`,
		"shape a string": `{"tensors":{"a":{"dtype":"BF16","shape":"4"}}}`,
	} {
		_, err := analyze.ParseTensorIndex([]byte(data))
		require.Equal(t, reason.SourceInvalid, analyze.CodeOf(err), name)
	}
}

func TestTensorIndexOfRoundTrips(t *testing.T) {
	t.Parallel()
	src := qwen3Small.source()
	ck := quantize(src, formBF16, nil).write(t, false)
	require.Equal(t, src, analyze.TensorIndexOf(ck))
}

func TestLabels(t *testing.T) {
	t.Parallel()
	l, err := analyze.ParseLabel("W4A16KV8")
	require.NoError(t, err)
	require.Equal(t, analyze.Label{W: 4, A: 16, KV: 8}, l)
	require.Equal(t, "W4A16KV8", l.String())
	require.Equal(t, []string{"A (16 > 8)"}, l.Wider(analyze.Label{W: 8, A: 8, KV: 8}))
	require.Empty(t, l.Wider(l))

	for dtype, want := range map[string]int{"fp8": 8, "FP8_E5M2": 8, "fp8_e4m3": 8, "nvfp4": 4, "auto": 16, "bfloat16": 16, "fp16": 16, "int8": 8, "float32": 32} {
		bits, ok, err := analyze.KVCacheBits(dtype)
		require.NoError(t, err, dtype)
		require.True(t, ok, dtype)
		require.Equal(t, want, bits, dtype)
	}
	_, ok, err := analyze.KVCacheBits("")
	require.NoError(t, err)
	require.False(t, ok)
}
