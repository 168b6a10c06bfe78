package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/safetensors"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// accuracy is the share of numeric and choice items of the dev suite the
// answer model gets right at a damage.
func accuracy(t *testing.T, damage float64) (float64, int) {
	s := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.DevSizes)
	right, n := 0, 0
	for _, d := range []string{"math", "knowledge", "commonsense", "long_context"} {
		for _, it := range s.Items[d] {
			for seed := range int64(4) {
				reply, ok := Reply(it.Prompt, seed, damage)
				require.True(t, ok, it.ID)
				again, _ := Reply(it.Prompt, seed, damage)
				require.Equal(t, reply, again, "deterministic under the seed")
				n++
				switch it.Grader {
				case suite.GraderNumeric:
					if strings.HasSuffix(reply, it.Answer) && !strings.HasSuffix(reply, "1"+it.Answer) {
						right++
					}
				case suite.GraderChoice:
					if strings.HasSuffix(reply, "Answer: "+it.Answer) || reply == it.Answer {
						right++
					}
				}
			}
		}
	}
	return float64(right) / float64(n), n
}

func TestAnswerModelDamageLowersAccuracy(t *testing.T) {
	bf16, n := accuracy(t, 0)
	fp8, _ := accuracy(t, 0.01)
	int4, _ := accuracy(t, 0.06)
	// BF16 near the model's reference accuracy (about 0.77 over these
	// domains), then lower with each step of damage.
	require.InDelta(t, 0.77, bf16, 0.06, "over %d samples", n)
	require.Less(t, fp8, bf16)
	require.Less(t, int4, fp8)
	require.Greater(t, int4, 0.6)
}

func TestDamageFromWhatIsStored(t *testing.T) {
	// A BF16 checkpoint whose config claims int4 is damaged as BF16: the
	// answer model reads the tensors, not the declaration.
	bf16 := checkpointOf(t, "BF16")
	require.Equal(t, 0.0, Damage(bf16, "bf16"))
	require.InDelta(t, 0.004, Damage(bf16, "fp8"), 1e-12)
	require.Equal(t, 0.06, Damage(checkpointOf(t, "U8"), "bf16"))
	require.Equal(t, 0.006, Damage(checkpointOf(t, "F8_E4M3"), "bf16"))
	require.Equal(t, 0.05, Damage(checkpointOf(t, "I32"), "bf16"))
}

func TestTopLogprobs(t *testing.T) {
	top := TopLogprobs("p", 3, "tok", 5, 0)
	require.Len(t, top, 5)
	sum := 0.0
	for _, lp := range top {
		require.Less(t, lp, 0.0)
		sum += math.Exp(lp)
	}
	require.Less(t, sum, 1.0, "a tail bucket keeps some mass")
	require.Equal(t, top, TopLogprobs("p", 3, "tok", 5, 0))
	require.NotEqual(t, top["tok"], TopLogprobs("p", 3, "tok", 5, 0.06)["tok"], "damage moves the distribution")
}

// checkpointOf writes and reads back a checkpoint whose linear weight has
// the given dtype.
func checkpointOf(t *testing.T, dtype string) *safetensors.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	var w safetensors.Writer
	require.NoError(t, w.Add(safetensors.Tensor{Name: "model.embed_tokens.weight", DType: safetensors.BF16, Shape: []int64{16, 8}}))
	require.NoError(t, w.Add(safetensors.Tensor{Name: "model.layers.0.mlp.weight", DType: safetensors.DType(dtype), Shape: []int64{8, 8}}))
	_, err := w.WriteFile(filepath.Join(dir, "model.safetensors"))
	require.NoError(t, err)
	c, err := safetensors.ReadCheckpoint(dir)
	require.NoError(t, err)
	return c
}
