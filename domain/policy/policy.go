// Package policy is the arena's scoring policy: versioned data (one JSON
// file per version, embedded), and the pure function that turns a
// submission's contract, quality and efficiency into its dev_score under
// a version. Every score row names its policy, so a newer policy rescores
// stored inputs without touching the old rows.
package policy

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"

	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/domain/stats"
)

//go:embed policies/*.json
var files embed.FS

// Default is the policy a score uses unless told otherwise.
const Default = "lowb-score/v1"

// Policy is one version of the scoring rules.
type Policy struct {
	Version     string `json:"version"`
	Description string `json:"description"`
	// Formula names the score's form: "log10_gain_times_drift_discount"
	// is log10(E) * max(0, 1 - D/DriftScale).
	Formula        string   `json:"formula"`
	DriftScale     float64  `json:"drift_scale"`
	QualifiedTiers []string `json:"qualified_tiers"`
	Decimals       int      `json:"decimals"`
}

// ErrUnknown is returned for a policy version the arena does not have.
var ErrUnknown = errors.New("policy: unknown version")

// Load returns a policy by version ("lowb-score/v1").
func Load(version string) (Policy, error) {
	entries, err := files.ReadDir("policies")
	if err != nil {
		return Policy{}, err
	}
	var have []string
	for _, e := range entries {
		data, err := files.ReadFile("policies/" + e.Name())
		if err != nil {
			return Policy{}, err
		}
		var p Policy
		if err := json.Unmarshal(data, &p); err != nil {
			return Policy{}, fmt.Errorf("policy: %s: %w", e.Name(), err)
		}
		if p.Version == version {
			return p, p.check()
		}
		have = append(have, p.Version)
	}
	return Policy{}, fmt.Errorf("%w %q (the arena has %v)", ErrUnknown, version, have)
}

func (p Policy) check() error {
	if p.Formula != "log10_gain_times_drift_discount" || p.DriftScale <= 0 || p.Decimals <= 0 {
		return fmt.Errorf("policy: %s: formula %q with drift_scale %v and decimals %d is not one this arena computes", p.Version, p.Formula, p.DriftScale, p.Decimals)
	}
	return nil
}

// Inputs are what a score is computed from: the three stages' outcomes.
type Inputs struct {
	// Contract is the contract block and Label the detected precision.
	Contract record.Contract
	Label    string
	// Quality is the dev_quality block and MeanDrop its mean drop over
	// the valid domains.
	Quality  record.Quality
	MeanDrop float64
	// Efficiency is what the efficiency stage measured.
	Efficiency Efficiency
}

// Efficiency is the efficiency stage's measurement as a score reads it.
type Efficiency struct {
	// Rate and BF16Rate are output tokens per second per workload, of the
	// submission and of its BF16 reference.
	Rate, BF16Rate map[string]float64
	// Peak and BF16Peak are the memory peaks per workload.
	Peak, BF16Peak map[string]record.PeakMemory
	// BudgetReason is the first failed budget's sentence, "" when every
	// budget held.
	BudgetReason string
	// AuditReason is the first failed engine audit's code and sentence
	// ("audit answer_cache_suspected: ..."), "" when none failed.
	AuditReason string
}

// Drift is D in points: 100 x the mean over valid domains of max(0, drop),
// 4 decimals (the policy's own definition; the records' D is not
// recoverable from them).
func Drift(q record.Quality) (float64, error) {
	valid := stats.ValidDomains(q.Domains)
	if len(valid) == 0 {
		return 0, stats.ErrNoValidDomain
	}
	s := 0.0
	for _, d := range valid {
		s += math.Max(0, q.Domains[d].Drop)
	}
	return formula.Round(100*s/float64(len(valid)), 4), nil
}

// Score is the policy's score of an efficiency gain E and a drift D.
func (p Policy) Score(gain, drift float64) float64 {
	return formula.Round(math.Log10(gain)*math.Max(0, 1-drift/p.DriftScale), p.Decimals)
}

var reKV = regexp.MustCompile(`KV(\d+)$`)

// Precision is the score's precision block, from the contract.
func Precision(c record.Contract, label string) record.Precision {
	p := record.Precision{Weights: c.WeightBits, Activations: c.ActivationBits, Label: label,
		WeightsAverage: formula.Round(c.BitsPerWeight, 2)}
	if m := reKV.FindStringSubmatch(label); m != nil {
		p.KV, _ = strconv.Atoi(m[1])
	}
	return p
}

// Compute is the dev_score of a submission under the policy.
//
//   - A broken contract, a failed engine audit (with its code and
//     sentence) or a failed budget disqualifies: score 0, every
//     efficiency field null (an engine that behaved differently when
//     measured, or did not keep to its budget, leaves no figure to
//     score). Where several failed, the reason names the integrity
//     failure first (the contract, then the audit: what the entry is or
//     did, before how it ran on a loaded pod), and Also lists the others
//     in that order, with the tier's reason when its tier is not
//     qualified either.
//   - Otherwise speeds, memories, E and memory saved follow the
//     efficiency formulas, D the policy's drift, and the score the
//     policy's formula; a tier outside the qualified ones keeps its score
//     for display and is not qualified, with the tier's reason.
func (p Policy) Compute(in Inputs) (record.Score, error) {
	s := record.Score{Precision: Precision(in.Contract, in.Label), Policy: p.Version}
	reason := func(r string) *string { return &r }
	var failed []string
	if !in.Contract.OK {
		failed = append(failed, "contract broken")
	}
	if r := in.Efficiency.AuditReason; r != "" {
		failed = append(failed, r)
	}
	if r := in.Efficiency.BudgetReason; r != "" {
		failed = append(failed, r)
	}
	if len(failed) > 0 {
		if r := p.tierReason(in.Quality.Tier); r != "" {
			failed = append(failed, r)
		}
		s.Reason = reason(failed[0])
		if len(failed) > 1 {
			s.Also = failed[1:]
		}
		return s, nil
	}
	rate, bf16Rate := in.Efficiency.Rate, in.Efficiency.BF16Rate
	peak, bf16Peak := map[string]float64{}, map[string]float64{}
	for w, pm := range in.Efficiency.Peak {
		peak[w] = pm.PeakGiB
	}
	for w, pm := range in.Efficiency.BF16Peak {
		bf16Peak[w] = pm.PeakGiB
	}
	sum, err := formula.Summarize(rate, bf16Rate, peak, bf16Peak)
	if err != nil {
		return s, fmt.Errorf("policy: %w", err)
	}
	drift, err := Drift(in.Quality)
	if err != nil {
		return s, fmt.Errorf("policy: %w", err)
	}
	md := in.MeanDrop
	s.Speeds, s.Memories = sum.Speeds, sum.Memories
	s.Speed, s.Memory, s.EfficiencyGain, s.MemorySaved = &sum.Speed, &sum.Memory, &sum.Gain, &sum.Saved
	s.PeakGiB, s.BF16PeakGiB, s.Drift, s.MeanDrop = &sum.PeakGiB, &sum.BF16PeakGiB, &drift, &md
	s.Score = p.Score(sum.Gain, drift)
	if r := p.tierReason(in.Quality.Tier); r != "" {
		s.Reason = reason(r)
		return s, nil
	}
	s.Qualified = true
	return s, nil
}

// tierReason is why a quality tier is not qualified under the policy, ""
// when it is.
func (p Policy) tierReason(tier string) string {
	if slices.Contains(p.QualifiedTiers, tier) {
		return ""
	}
	if r := stats.Reason(tier); r != "" {
		return r
	}
	return "quality tier " + tier + " is not qualified under " + p.Version
}
