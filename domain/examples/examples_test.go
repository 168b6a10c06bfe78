package examples_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/analyze"
	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/safetensors"
)

// hashes returns the sha256 of every file under dir, by relative path.
func hashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	}))
	return out
}

func TestWriteDeterministic(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	start := time.Now()
	exA, err := examples.Write(a)
	require.NoError(t, err)
	t.Logf("Write took %v", time.Since(start))
	exB, err := examples.Write(b)
	require.NoError(t, err)
	ha, hb := hashes(t, a), hashes(t, b)
	require.NotEmpty(t, ha)
	require.Equal(t, ha, hb)
	require.Len(t, exB, len(exA))
	for i := range exA {
		require.Equal(t, exA[i].Name, exB[i].Name)
		require.Equal(t, filepath.Join(b, "submissions", exB[i].Name), exB[i].Dir)
	}

	// Writing again over the same folder gives the same bytes.
	_, err = examples.Write(a)
	require.NoError(t, err)
	require.Equal(t, ha, hashes(t, a))
}

// written is one shared Write for the read-only tests.
func written(t *testing.T) (string, []examples.Example) {
	t.Helper()
	dir := t.TempDir()
	exs, err := examples.Write(dir)
	require.NoError(t, err)
	return dir, exs
}

func codes(vs []string) []string {
	out := slices.Clone(vs)
	slices.Sort(out)
	return out
}

func TestContract(t *testing.T) {
	t.Parallel()
	dir, exs := written(t)
	camp, err := campaign.Load(filepath.Join(dir, "campaigns", examples.TaskID))
	require.NoError(t, err)
	require.Equal(t, examples.TaskID, camp.TaskID)
	require.Equal(t, "qwen3", camp.Family)

	bpw := map[string][2]float64{
		"bf16-reference": {16, 16},
		"fp8-w8a8":       {8, 8.2},
		"int4-w4a16-g32": {4.45, 4.55},
		"nvfp4-w4a4":     {4.45, 4.55},
	}
	names := make([]string, 0, len(exs))
	for _, ex := range exs {
		names = append(names, ex.Name)
	}
	require.Equal(t, []string{
		"bf16-reference", "fp8-w8a8", "int4-w4a16-g32", "nvfp4-w4a4",
		"engine-async-scheduling", "engine-fast-path", "engine-answer-cache", "engine-padded-tokens", "engine-other-model",
		"engine-other-model-always", "engine-route-by-shape",
		"bf16-declared-w4", "foreign-tensors", "rope-theta-changed", "kv4-declared-engine-kv8",
	}, names)

	for _, ex := range exs {
		t.Run(ex.Name, func(t *testing.T) {
			t.Parallel()
			require.True(t, filepath.IsAbs(ex.Dir))
			require.NotEmpty(t, ex.About)
			require.Equal(t, ex.Honest, len(ex.Violations) == 0)
			require.True(t, slices.IsSorted(ex.Violations))

			ck, err := safetensors.ReadCheckpoint(ex.Dir)
			require.NoError(t, err)
			cfg, err := os.ReadFile(filepath.Join(ex.Dir, "config.json"))
			require.NoError(t, err)
			declData, err := os.ReadFile(filepath.Join(ex.Dir, bundle.DeclarationFile))
			require.NoError(t, err)
			decl, err := bundle.ParseDeclaration(declData)
			require.NoError(t, err)
			require.Equal(t, examples.TaskID, decl.TaskID)
			require.Equal(t, ex.Declared, decl.Solution.Precision)
			require.NotNil(t, decl.Engine)
			// A cheating example carries an engine patch; an example
			// without a patch has no audit to fail. The patch's text is
			// checked in TestExampleCampaignPinsEngineSource.
			if ex.Audit != "" {
				require.NotEmpty(t, ex.Patch)
			}
			if ex.Patch == "" {
				require.Empty(t, decl.Engine.Patch)
			} else {
				require.True(t, ex.Honest, "its contract holds")
				require.Equal(t, examples.PatchFile, decl.Engine.Patch)
				require.FileExists(t, filepath.Join(ex.Dir, examples.PatchFile))
			}
			for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
				require.FileExists(t, filepath.Join(ex.Dir, f))
			}

			c, err := analyze.Analyze(analyze.Input{
				Config:       cfg,
				Checkpoint:   ck,
				Source:       camp.Source,
				Declared:     decl.Solution.Precision,
				KVCacheDType: decl.Engine.KVCacheDType,
				Policy:       camp.Policy.Analyze(),
			})
			require.NoError(t, err)
			var got []string
			for _, v := range c.Violations {
				got = append(got, v.Code)
			}
			require.Equal(t, ex.Violations, append([]string{}, codes(got)...), "%+v", c.Violations)
			require.Equal(t, ex.Honest, c.OK)
			require.Equal(t, ex.Detected, c.DetectedPrecision)
			require.Equal(t, ex.Declared, c.DeclaredPrecision)
			require.Less(t, c.SafetensorBytes, int64(6<<20), "a few MB at most")
			if r, ok := bpw[ex.Name]; ok {
				require.GreaterOrEqual(t, c.BitsPerWeight, r[0])
				require.LessOrEqual(t, c.BitsPerWeight, r[1])
			}
			t.Logf("%s: detected %s, violations %v, bits_per_weight %.4f, model_bits_per_weight %.4f, safetensor_bytes %d, format %s",
				ex.Name, c.DetectedPrecision, got, c.BitsPerWeight, c.ModelBitsPerWeight, c.SafetensorBytes, c.Format)
		})
	}
}

// tensorData returns the bytes of a tensor of the checkpoint in dir, read
// from its file at the header's offsets.
func tensorData(t *testing.T, dir, name string) (safetensors.Located, []byte) {
	t.Helper()
	ck, err := safetensors.ReadCheckpoint(dir)
	require.NoError(t, err)
	loc, ok := ck.Tensor(name)
	require.True(t, ok, "%s holds no %s", dir, name)
	var h *safetensors.Header
	for _, f := range ck.Files {
		if f.Name == loc.File {
			h = f.Header
		}
	}
	require.NotNil(t, h)
	f, err := os.Open(filepath.Join(dir, loc.File))
	require.NoError(t, err)
	defer f.Close()
	data := make([]byte, loc.Bytes())
	_, err = f.ReadAt(data, 8+h.HeaderLen+loc.Begin)
	require.NoError(t, err)
	return loc, data
}

func bf16(data []byte, i int) float64 {
	return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(data[2*i:])) << 16))
}

func f32(data []byte, i int) float64 {
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
}

// e4m3 decodes an FP8 E4M3 (fn) code independently of the package's
// decoder.
func e4m3(c byte) float64 {
	e, m := int(c>>3&0xF), float64(c&7)
	v := math.Ldexp(1+m/8, e-7)
	if e == 0 {
		v = math.Ldexp(m/8, -6)
	}
	if c&0x80 != 0 {
		return -v
	}
	return v
}

func e2m1(c byte) float64 {
	v := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}[c&7]
	if c&8 != 0 {
		return -v
	}
	return v
}

// TestDequantize decodes the quantized weights from the written bytes and
// checks each is within half a quantization step of the BF16 original.
func TestDequantize(t *testing.T) {
	t.Parallel()
	dir, _ := written(t)
	sub := func(name string) string { return filepath.Join(dir, "submissions", name) }
	modules := []string{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.1.mlp.down_proj", "model.layers.1.self_attn.o_proj"}

	tests := []struct {
		example string
		// check compares the dequantized weights of a module to the
		// originals, row-major [rows, cols].
		check func(t *testing.T, dir, module string, orig []float64, rows, cols int)
	}{
		{"fp8-w8a8", func(t *testing.T, dir, module string, orig []float64, rows, cols int) {
			loc, w := tensorData(t, dir, module+".weight")
			require.Equal(t, safetensors.F8E4M3, loc.DType)
			sl, s := tensorData(t, dir, module+".weight_scale")
			require.Equal(t, []int64{int64(rows), 1}, sl.Shape)
			for r := range rows {
				scale := f32(s, r)
				amax := 0.0
				for c := range cols {
					amax = max(amax, math.Abs(orig[r*cols+c]))
				}
				require.InEpsilon(t, amax/448, scale, 1e-6)
				for c := range cols {
					i := r*cols + c
					got, want := e4m3(w[i])*scale, orig[i]
					// Half a step: 2^-4 relative for normals, 2^-10 of the
					// scale for subnormals.
					require.LessOrEqual(t, math.Abs(got-want), max(math.Abs(want)*0x1p-4, scale*0x1p-10)*(1+1e-6), "%s[%d,%d]", module, r, c)
				}
			}
		}},
		{"int4-w4a16-g32", func(t *testing.T, dir, module string, orig []float64, rows, cols int) {
			pl, p := tensorData(t, dir, module+".weight_packed")
			require.Equal(t, safetensors.I32, pl.DType)
			require.Equal(t, []int64{int64(rows), int64(cols / 8)}, pl.Shape)
			_, s := tensorData(t, dir, module+".weight_scale")
			_, shape := tensorData(t, dir, module+".weight_shape")
			require.Equal(t, int64(rows), int64(binary.LittleEndian.Uint64(shape)))
			require.Equal(t, int64(cols), int64(binary.LittleEndian.Uint64(shape[8:])))
			for r := range rows {
				for c := range cols {
					i := r*cols + c
					word := binary.LittleEndian.Uint32(p[4*(i/8):])
					q := int(word>>(4*(i%8))&0xF) - 8
					scale := bf16(s, r*cols/32+c/32)
					got, want := float64(q)*scale, orig[i]
					require.LessOrEqual(t, math.Abs(got-want), scale/2*(1+1e-6), "%s[%d,%d]", module, r, c)
				}
			}
		}},
		{"nvfp4-w4a4", func(t *testing.T, dir, module string, orig []float64, rows, cols int) {
			pl, p := tensorData(t, dir, module+".weight_packed")
			require.Equal(t, safetensors.U8, pl.DType)
			_, s := tensorData(t, dir, module+".weight_scale")
			_, g := tensorData(t, dir, module+".weight_global_scale")
			_, ig := tensorData(t, dir, module+".input_global_scale")
			gs := f32(g, 0)
			amax := 0.0
			for _, v := range orig {
				amax = max(amax, math.Abs(v))
			}
			require.InEpsilon(t, 448*6/amax, gs, 1e-6)
			require.Greater(t, f32(ig, 0), 0.0)
			for r := range rows {
				for c := range cols {
					i := r*cols + c
					code := p[i/2] >> (4 * (i % 2)) & 0xF
					scale := e4m3(s[i/16]) / gs
					got, want := e2m1(code)*scale, orig[i]
					// Half the FP4 step at the value, and at the top the
					// saturation of a scale rounded down (at most 2^-4).
					x := math.Abs(want) / scale
					half := 0.25
					switch {
					case x > 4:
						half = 1
					case x > 2:
						half = 0.5
					}
					require.LessOrEqual(t, math.Abs(got-want), half*scale*(1+1e-6), "%s[%d,%d]", module, r, c)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.example, func(t *testing.T) {
			t.Parallel()
			for _, m := range modules {
				loc, data := tensorData(t, sub("bf16-reference"), m+".weight")
				require.Equal(t, safetensors.BF16, loc.DType)
				rows, cols := int(loc.Shape[0]), int(loc.Shape[1])
				orig := make([]float64, rows*cols)
				nonzero := 0
				for i := range orig {
					orig[i] = bf16(data, i)
					if orig[i] != 0 {
						nonzero++
					}
				}
				require.Greater(t, nonzero, len(orig)*9/10, "real weights, not zeros")
				tt.check(t, sub(tt.example), m, orig, rows, cols)
			}
		})
	}
}

// TestDishonestShareSource checks the refused examples are built on the
// honest ones: the same linear weights as the int4 checkpoint or the BF16
// source.
func TestDishonestShareSource(t *testing.T) {
	t.Parallel()
	dir, _ := written(t)
	sub := func(name string) string { return filepath.Join(dir, "submissions", name) }
	const w = "model.layers.1.mlp.up_proj"
	_, ref := tensorData(t, sub("int4-w4a16-g32"), w+".weight_packed")
	for _, name := range []string{"foreign-tensors", "rope-theta-changed", "kv4-declared-engine-kv8"} {
		_, got := tensorData(t, sub(name), w+".weight_packed")
		require.Equal(t, ref, got, name)
	}
	_, src := tensorData(t, sub("bf16-reference"), w+".weight")
	_, got := tensorData(t, sub("bf16-declared-w4"), w+".weight")
	require.Equal(t, src, got)
}

// TestEngineAlternatives: each engine block beside the campaign, put in
// campaign.json's place as its README says, gives a campaign that loads,
// serving with that engine's command.
func TestEngineAlternatives(t *testing.T) {
	t.Parallel()
	dir, _ := written(t)
	camp := filepath.Join(dir, "campaigns", examples.TaskID)
	base, err := os.ReadFile(filepath.Join(camp, campaign.File))
	require.NoError(t, err)
	for name, want := range map[string]string{"vllm.json": examples.VLLMEngineCommand, "sglang.json": examples.SGLangEngineCommand} {
		alt, err := os.ReadFile(filepath.Join(camp, examples.EnginesDir, name))
		require.NoError(t, err)
		var meta, block map[string]any
		require.NoError(t, json.Unmarshal(base, &meta))
		require.NoError(t, json.Unmarshal(alt, &block))
		meta["engine"] = block["engine"]
		merged, err := json.Marshal(meta)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(camp, campaign.File), merged, 0o644))
		c, err := campaign.Load(camp)
		require.NoError(t, err, name)
		require.Equal(t, want, c.Engine.Command, name)
		require.Equal(t, 256, c.Engine.MaxNumSeqs, name)
		require.Equal(t, examples.EngineMaxModelLen, c.Engine.MaxModelLen, name, "the context comes from the campaign")
	}
	readme, err := os.ReadFile(filepath.Join(camp, examples.EnginesDir, "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "engines/vllm.json")
}
