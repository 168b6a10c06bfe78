package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
)

// TestShowUnquantizedModules: show prints the modules outside the label in
// one line below the contract, counted per kind, and nothing when the
// contract lists none.
func TestShowUnquantizedModules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mods []record.UnquantizedModule
		want string
	}{
		{"none", nil, ""},
		{"a DeepSeek-style checkpoint", []record.UnquantizedModule{
			{Name: "model.embed_tokens", Kind: "embedding", Count: 1, DType: "BF16", Bytes: 1 << 20},
			{Name: "lm_head", Kind: "lm_head", Count: 1, DType: "BF16", Bytes: 1 << 20},
			{Name: "model.layers.*.input_layernorm", Kind: "norm", Count: 2, DType: "BF16", Bytes: 256},
			{Name: "model.norm", Kind: "norm", Count: 1, DType: "BF16", Bytes: 256},
			{Name: "model.layers.*.mlp.gate", Kind: "gate", Count: 1, DType: "F32", Bytes: 512},
		}, "  unquantized 1 embedding · 1 lm_head · 3 norms · 1 gate (BF16/F32, 2.0 MiB), outside the label\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &record.Submission{ID: "abc", Result: record.Result{Contract: &record.Contract{OK: true, DetectedPrecision: "W8A8KV16",
				UnquantizedModules: tt.mods}}}
			var out bytes.Buffer
			renderRecord(&out, rec)
			lines := strings.SplitAfter(out.String(), "\n")
			var got string
			for _, l := range lines {
				if strings.HasPrefix(l, "  unquantized ") {
					got += l
				}
			}
			require.Equal(t, tt.want, got)
			require.Contains(t, out.String(), "  contract    kept · reads W8A8KV16")
		})
	}
}

// TestAuditLine: the audits in one line, the failed one's reason first.
func TestAuditLine(t *testing.T) {
	a := &record.Audit{Verdict: record.VerdictFail, Reason: "answer_cache_suspected",
		ServedModel:       &record.ServedModelAudit{Check: record.Check{Verdict: record.VerdictPass}, Probes: 8, Agreed: 8},
		TokenHonesty:      &record.TokenAudit{Check: record.Check{Verdict: record.VerdictPass}, Ratio: 1},
		AnswerCache:       &record.CacheAudit{Check: record.Check{Verdict: record.VerdictFail}, Ratio: 0.01},
		AccuracyUnderLoad: &record.AccuracyAudit{Check: record.Check{Verdict: record.VerdictPass}, Compared: 64, Agreement: 1, LoadAccuracy: 0.75, QualityAccuracy: 0.75}}
	require.Equal(t, "FAILED answer_cache_suspected · served model pass (8/8 probes agree) · tokens pass (claimed 1.00x re-tokenised) · "+
		"cache fail (repeats at 0.01x the time per token) · under load pass (64 items, 100% agree, accuracy 0.750 vs 0.750)", auditLine(a))
	require.Equal(t, "skipped", auditLine(&record.Audit{Verdict: record.VerdictSkipped}))
}

// TestShowPatch: show prints a bundle's engine patch (file, digest,
// files touched, lines) and the engine built from it; a patch from before
// summaries were kept shows its file and digest only.
func TestShowPatch(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("ab", 32)
	engine := strings.Repeat("cd", 32)
	source := strings.Repeat("ef", 32)
	files := []string{"a.go", "b.go", "c.go", "d.go", "e.go", "f.go", "g.go", "h.go", "i.go", "j.go"}
	tests := []struct {
		name  string
		patch *record.Patch
		want  string
	}{
		{"none", nil, ""},
		{"before summaries", &record.Patch{Path: "fast.patch", Size: 10, SHA256: sha}, "  patch       fast.patch · sha256 " + sha[:12] + "\n"},
		{"checked", &record.Patch{Path: "patches/fast.patch", Size: 10, SHA256: sha, Files: []string{"sched/batch.go", "sched/sched.go"},
			LinesAdded: 12, LinesRemoved: 3, Revision: "simengine 1.0", SourceDigest: source, EngineDigest: engine},
			"  patch       patches/fast.patch · sha256 " + sha[:12] + " · 2 files, +12 -3 lines\n" +
				"  touches     sched/batch.go, sched/sched.go\n" +
				"  engine      " + engine[:12] + ", patched from simengine 1.0 (" + source[:12] + ")\n"},
		{"many files", &record.Patch{Path: "p", SHA256: sha, Files: files, LinesAdded: 10, EngineDigest: engine, SourceDigest: source},
			"  patch       p · sha256 " + sha[:12] + " · 10 files, +10 -0 lines\n" +
				"  touches     a.go, b.go, c.go, d.go, e.go, f.go, g.go, h.go and 2 more\n" +
				"  engine      " + engine[:12] + ", patched from " + source[:12] + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &record.Submission{ID: "abc", Bundle: &record.Bundle{Digest: sha, Files: 3, Patch: tt.patch}}
			var out bytes.Buffer
			renderRecord(&out, rec)
			var got string
			for _, l := range strings.SplitAfter(out.String(), "\n") {
				for _, p := range []string{"  patch ", "  touches ", "  engine "} {
					if strings.HasPrefix(l, p) {
						got += l
					}
				}
			}
			require.Equal(t, tt.want, got)
		})
	}
}
