package main

import (
	"fmt"
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
)

// auditLine says in one line how the engine's audits went: each audit's
// verdict and its figure, the failed one's reason first.
func auditLine(a *record.Audit) string {
	var parts []string
	if a.Verdict == record.VerdictFail {
		parts = append(parts, "FAILED "+a.Reason)
	} else {
		parts = append(parts, a.Verdict)
	}
	if s := a.ServedModel; s != nil {
		parts = append(parts, fmt.Sprintf("served model %s (%d/%d probes agree)", s.Verdict, s.Agreed, s.Probes))
	}
	if t := a.TokenHonesty; t != nil {
		parts = append(parts, fmt.Sprintf("tokens %s (claimed %.2fx re-tokenised)", t.Verdict, t.Ratio))
	}
	if c := a.AnswerCache; c != nil {
		parts = append(parts, fmt.Sprintf("cache %s (repeats at %.2fx the time per token)", c.Verdict, c.Ratio))
	}
	if u := a.AccuracyUnderLoad; u != nil {
		parts = append(parts, fmt.Sprintf("under load %s (%d items, %.0f%% agree, accuracy %.3f vs %.3f)",
			u.Verdict, u.Compared, 100*u.Agreement, u.LoadAccuracy, u.QualityAccuracy))
	}
	return strings.Join(parts, " · ")
}
