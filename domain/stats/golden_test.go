package stats_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/stats"
)

// The two records of a real arena of this kind (../../schemas/testdata).
const (
	rec8b  = "submission_qwen3-8b_b0c4e95f426f48e2.json"   // 002: quality tier fail, scored
	rec27b = "submission_qwen35-27b_4632bca02a3846d5.json" // 001: tier A, disqualified at the contract stage
)

func load(t *testing.T, name string) record.Submission {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "schemas", "testdata", "lowbarena", name))
	require.NoError(t, err)
	var r record.Submission
	require.NoError(t, json.Unmarshal(data, &r))
	require.NotNil(t, r.Result.DevQuality, name)
	return r
}

// golden is what each fixture must give beyond its own recorded fields.
type golden struct {
	file     string
	tier     string
	reason   string
	meanDrop float64 // the mean drop over the valid domains, 5 decimals (seed formulas §2)
	// totals are the summed output tokens of the candidate and of BF16
	// (seed formulas §7).
	tokens, tokensBF16 int
}

var goldens = []golden{
	{file: rec8b, tier: stats.TierFail, reason: "quality tier fail below B", meanDrop: 0.01074, tokens: 667846, tokensBF16: 673150},
	{file: rec27b, tier: stats.TierA, reason: "", meanDrop: 0.00512, tokens: 785504, tokensBF16: 775969},
}

// TestGoldenDomains recomputes every derived per-domain field of both
// fixtures from the recorded bf16, quantized, se, bf16_se, chance and items:
// headroom, recovery, upper and recovery_se bit-exact, drop bit-exact for
// the domains with discrete item scores and within 1e-15 for long_context,
// whose recorded drop is the mean of continuous per-item differences
// (seed formulas §1), and the status from the item count.
func TestGoldenDomains(t *testing.T) {
	for _, g := range goldens {
		r := load(t, g.file)
		require.Len(t, r.Result.DevQuality.Domains, 6, g.file)
		for name, want := range r.Result.DevQuality.Domains {
			t.Run(g.file+"/"+name, func(t *testing.T) {
				got, err := stats.Derive(stats.Means{
					BF16: want.BF16, Quantized: want.Quantized, SE: want.SE, BF16SE: want.BF16SE,
					Chance: want.Chance, Items: want.Items,
					FormatContract: want.FormatContract, CandidateLost: want.CandidateLost,
				})
				require.NoError(t, err)
				require.Equal(t, want.Headroom, got.Headroom, "headroom")
				require.Equal(t, want.Recovery, got.Recovery, "recovery")
				require.Equal(t, want.RecoverySE, got.RecoverySE, "recovery_se")
				require.Equal(t, want.Status, got.Status, "status")
				if name == "long_context" {
					// The record keeps the mean of continuous per-item
					// differences, which the means give back only to the
					// last bits; its upper is drop + Z*se from that drop.
					require.InDelta(t, want.Drop, got.Drop, 1e-15, "drop")
					require.InDelta(t, want.Upper, got.Upper, 1e-15, "upper")
					require.Equal(t, want.Upper, want.Drop+float64(stats.Z*want.SE), "upper from the recorded drop")
					got.Drop, got.Upper = want.Drop, want.Upper
				}
				require.Equal(t, want.Drop, got.Drop, "drop")
				require.Equal(t, want.Upper, got.Upper, "upper")
				require.Equal(t, want, got, "every field")
			})
		}
	}
}

// TestGoldenOverall recomputes every aggregate of both fixtures from their
// recorded domain blocks (seed formulas §2): valid_domains, recovery,
// recovery_se, worst_domain, worst_drop and worst_upper bit-exact, the tier
// and the dev score's reason, and mean_drop (recorded as 0.01074 in 002's
// dev score, null in 001's).
func TestGoldenOverall(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			r := load(t, g.file)
			want := r.Result.DevQuality
			got, err := stats.Overall(want.Domains)
			require.NoError(t, err)
			require.Equal(t, []string{"code", "commonsense", "knowledge", "long_context", "math"}, stats.ValidDomains(want.Domains))
			require.Equal(t, want.ValidDomains, got.ValidDomains, "valid_domains")
			require.Equal(t, want.Recovery, got.Recovery, "recovery")
			require.Equal(t, want.RecoverySE, got.RecoverySE, "recovery_se")
			require.Equal(t, want.WorstDomain, got.WorstDomain, "worst_domain")
			require.Equal(t, want.WorstDrop, got.WorstDrop, "worst_drop")
			require.Equal(t, want.WorstUpper, got.WorstUpper, "worst_upper")
			require.Equal(t, want.Tier, got.Tier, "tier")
			require.Equal(t, g.tier, got.Tier)
			require.Equal(t, want.Domains, got.Domains)

			reason := stats.Reason(got.Tier)
			require.Equal(t, g.reason, reason)
			md, err := stats.MeanDrop(want.Domains)
			require.NoError(t, err)
			require.Equal(t, g.meanDrop, md)
			if ds := r.Result.DevScore; ds.MeanDrop != nil {
				require.Equal(t, *ds.MeanDrop, md, "dev_score.mean_drop")
				require.Equal(t, 0.01074, md)
				require.NotNil(t, ds.Reason)
				require.Equal(t, *ds.Reason, reason, "dev_score.reason")
			}

			// Overall from the re-derived domains gives the same aggregates
			// (long_context's drop moves by at most 1e-16, which changes no
			// aggregate that uses upper or recovery).
			derived := map[string]record.Domain{}
			for name, d := range want.Domains {
				dd, err := stats.Derive(stats.Means{BF16: d.BF16, Quantized: d.Quantized, SE: d.SE, BF16SE: d.BF16SE, Chance: d.Chance, Items: d.Items})
				require.NoError(t, err)
				derived[name] = dd
			}
			again, err := stats.Overall(derived)
			require.NoError(t, err)
			require.Equal(t, got.Recovery, again.Recovery)
			require.Equal(t, got.RecoverySE, again.RecoverySE)
			require.Equal(t, got.WorstDomain, again.WorstDomain)
			require.Equal(t, got.Tier, again.Tier)
		})
	}
}

// TestGoldenLength reproduces both fixtures' length_generations,
// length_tokens, length_tokens_bf16 and length_shift bit-exact from the
// token totals (seed formulas §7), spread over 4544 paired generations.
// length_shift_se is not checked: the records keep no per-generation
// lengths to derive it from.
func TestGoldenLength(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			want := load(t, g.file).Result.DevQuality.Length
			n := want.LengthGenerations
			require.Equal(t, 4544, n)
			got, err := stats.Length(spread(g.tokens, n), spread(g.tokensBF16, n))
			require.NoError(t, err)
			require.Equal(t, want.LengthGenerations, got.LengthGenerations)
			require.Equal(t, want.LengthTokens, got.LengthTokens, "length_tokens")
			require.Equal(t, want.LengthTokensBF16, got.LengthTokensBF16, "length_tokens_bf16")
			require.Equal(t, want.LengthShift, got.LengthShift, "length_shift")
			require.Positive(t, got.LengthShiftSE)
		})
	}
}

// spread splits total tokens over n generations with uneven lengths.
func spread(total, n int) []int {
	out := make([]int, n)
	left := total
	for i := range out {
		v := total / n
		if i%3 == 0 {
			v += 7
		} else if i%3 == 1 {
			v -= 7
		}
		out[i] = v
		left -= v
	}
	out[n-1] += left
	return out
}
