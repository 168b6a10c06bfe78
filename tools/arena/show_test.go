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
