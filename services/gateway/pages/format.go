package pages

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lowbarena/lowbarena/domain/record"
)

// Dash stands for a figure that is not there.
const Dash = "—"

// Fixed writes v with d decimals ("—" for NaN or an infinity).
func Fixed(v float64, d int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return Dash
	}
	s := strconv.FormatFloat(v, 'f', d, 64)
	if strings.Trim(s, "-0.") == "" {
		s = strings.TrimPrefix(s, "-")
	}
	return s
}

// FixedP writes *v with d decimals, or "—" for nil.
func FixedP(v *float64, d int) string {
	if v == nil {
		return Dash
	}
	return Fixed(*v, d)
}

// Ratio writes a ratio as "1.23×".
func Ratio(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return Dash
	}
	return Fixed(v, 2) + "×"
}

// Percent writes a share as a percentage with d decimals.
func Percent(v float64, d int) string { return Fixed(100*v, d) + "%" }

// GiB writes a size in GiB with three decimals, as the records keep it.
func GiB(v float64) string { return Fixed(v, 3) + " GiB" }

// Bytes writes a byte count in binary units.
func Bytes(n int64) string {
	switch f := float64(n); {
	case n >= 1<<30:
		return Fixed(f/(1<<30), 2) + " GiB"
	case n >= 1<<20:
		return Fixed(f/(1<<20), 1) + " MiB"
	case n >= 1<<10:
		return Fixed(f/(1<<10), 1) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// When writes a moment as the arena's pages do, in UTC:
// "Sep 17, 2026, 15:03:46 UTC"; "Not recorded" for nil.
func When(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "Not recorded"
	}
	return t.UTC().Format("Jan 2, 2006, 15:04:05 UTC")
}

// Clock writes a moment's time of day in UTC ("15:03:46").
func Clock(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05")
}

// Span writes a duration for people: "0ms", "450ms", "3.2s", "4m 05s",
// "2h 17m"; "—" for a negative one.
func Span(d time.Duration) string {
	switch {
	case d < 0:
		return Dash
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return Fixed(d.Seconds(), 1) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm %02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh %02dm", int(d.Hours()), int(d.Minutes())%60)
}

// Between is the time from a to b, or "—" when either is missing.
func Between(a, b *time.Time) string {
	if a == nil || b == nil {
		return Dash
	}
	return Span(b.Sub(*a))
}

// Short writes a long id as its first and last characters: "4c3fe52…98761".
func Short(s string) string {
	if len(s) <= 16 {
		return s
	}
	return s[:7] + "…" + s[len(s)-5:]
}

// PatchLabel is an engine patch in one line, as the round page's patch
// column shows it: its path and digest, then, once the build stage has
// checked it against the campaign's pinned source, its files and lines
// and the engine built from it ("patches/fast.patch 3f2a91c…9c0de · 2
// files +12 −3 · engine 7b1e2aa…41f0c"). Nil is "".
func PatchLabel(p *record.Patch) string {
	if p == nil {
		return ""
	}
	s := p.Path + " " + Short(p.SHA256)
	if len(p.Files) > 0 {
		s += fmt.Sprintf(" · %d files +%d −%d", len(p.Files), p.LinesAdded, p.LinesRemoved)
	}
	if p.EngineDigest != "" {
		s += " · engine " + Short(p.EngineDigest)
	}
	return s
}
