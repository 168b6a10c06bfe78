package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/formula"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
)

// ErrUnknownSubmission says that the arena has no record under an id.
var ErrUnknownSubmission = errors.New("no such submission")

func cmdShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("show", stderr)
	natsURL := natsFlag(fs)
	asJSON := fs.Bool("json", false, "print the record as JSON, in the layout of the arena's records")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("show takes one submission id (arena show ID [--json])")
	}
	id := pos[0]
	if !events.ValidID(id) {
		return usageErr("%q is not a submission id (ids are letters, digits, '-' and '_')", id)
	}
	c, err := dial(ctx, *natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	raw, err := fetchRecord(ctx, c, id)
	if err != nil {
		return err
	}
	if *asJSON {
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return fmt.Errorf("record %s is not valid JSON: %w", id, err)
		}
		buf.WriteByte('\n')
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	var rec record.Submission
	if err := json.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("decode record %s: %w", id, err)
	}
	renderRecord(stdout, &rec)
	return nil
}

// fetchRecord returns the stored JSON of a submission's record.
func fetchRecord(ctx context.Context, c *client, id string) ([]byte, error) {
	kv, err := c.submissions(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: the arena has no submission %s (list them with `arena watch --all`)", ErrUnknownSubmission, id)
		}
		return nil, fmt.Errorf("read record %s: %w", id, err)
	}
	return e.Value(), nil
}

// renderRecord writes a record for people: who, what, the stages, and
// whatever results the stages have added.
func renderRecord(w io.Writer, r *record.Submission) {
	fmt.Fprintf(w, "submission %s  %s\n", r.ID, strings.ToUpper(r.Status))
	fmt.Fprintf(w, "  participant %s · task %s · split %s · track %s\n", r.Participant, r.TaskID, r.Split, r.Track)
	decl := r.Solution.Precision
	if decl == "" {
		decl = "(none declared)"
	}
	fmt.Fprintf(w, "  checkpoint  %s · method %s · declared %s", r.Solution.Checkpoint, r.Solution.Method, decl)
	if r.Solution.DetectedPrecision != "" {
		fmt.Fprintf(w, " · the service reads %s", r.Solution.DetectedPrecision)
	}
	fmt.Fprintln(w)
	if r.Bundle != nil {
		fmt.Fprintf(w, "  bundle      %d files, %s, sha256 %s", r.Bundle.Files, bundle.HumanSize(r.Bundle.Bytes), short(r.Bundle.Digest))
		if r.Bundle.DuplicateOf != "" {
			fmt.Fprintf(w, " (same bundle as %s)", r.Bundle.DuplicateOf)
		}
		fmt.Fprintln(w)
		if ref := r.Bundle.Reference; ref != nil {
			fmt.Fprintf(w, "  reference   %s@%s · %d files, %s, shards read from the repository\n", ref.Repository, ref.Revision, ref.Files, bundle.HumanSize(ref.Bytes))
		}
		renderPatch(w, r.Bundle.Patch)
	}
	fmt.Fprintf(w, "  stages      %s\n", stageLine(r.Stages))
	res := r.Result
	if r.Error != nil {
		msg := r.Error.Message
		if c := res.Contract; c != nil && len(c.Violations) > 0 {
			msg = "the checkpoint breaks its contract (below)"
		}
		fmt.Fprintf(w, "  error       %s at %s: %s\n", r.Error.Code, r.Error.Stage, msg)
	}
	if c := res.Contract; c != nil {
		verdict := "kept"
		if !c.OK {
			verdict = fmt.Sprintf("BROKEN (%d violations)", len(c.Violations))
		}
		fmt.Fprintf(w, "  contract    %s · reads %s · %.3f bits/weight (%.3f over all tensors) · %s of safetensors",
			verdict, c.DetectedPrecision, c.BitsPerWeight, c.ModelBitsPerWeight, bundle.HumanSize(c.SafetensorBytes))
		if c.ForeignTensors.Count > 0 {
			fmt.Fprintf(w, " · %d foreign tensors (%.2f%%)", c.ForeignTensors.Count, 100*c.ForeignTensors.Share)
		}
		fmt.Fprintln(w)
		if line := unquantizedLine(c.UnquantizedModules); line != "" {
			fmt.Fprintf(w, "  unquantized %s\n", line)
		}
		for _, v := range c.Violations {
			fmt.Fprintf(w, "              - %s: %s\n", v.Code, v.Message)
		}
	}
	renderEfficiency(w, res)
	if q := res.DevQuality; q != nil {
		fmt.Fprintf(w, "  quality     tier %s · recovery %.4f ± %.4f · worst %s (drop %.4f, upper %.4f) · %d valid domains",
			q.Tier, q.Recovery, q.RecoverySE, q.WorstDomain, q.WorstDrop, q.WorstUpper, q.ValidDomains)
		if q.Tier == "fail" {
			fmt.Fprint(w, " · quality tier fail below B")
		}
		fmt.Fprintln(w)
		for _, name := range slices.Sorted(maps.Keys(q.Domains)) {
			d := q.Domains[name]
			fmt.Fprintf(w, "              %-12s bf16 %.3f · quantized %.3f · drop %+.4f ± %.4f (upper %.4f) · %d items · %s\n",
				name, d.BF16, d.Quantized, d.Drop, d.SE, d.Upper, d.Items, d.Status)
		}
		if kl := res.KL; kl != nil {
			fmt.Fprintf(w, "              KL vs BF16 %.5f ± %.5f over %d sequences · length shift %+.2f%%\n", kl.KL, kl.KLSE, kl.Sequences, 100*q.Length.LengthShift)
		}
	}
	if e := res.Engine; e != nil && e.Audit != nil && e.Audit.Verdict != "" {
		fmt.Fprintf(w, "  audits      %s\n", auditLine(e.Audit))
	}
	if s := res.DevScore; s != nil {
		fmt.Fprintf(w, "  score       %.4f", s.Score)
		if s.EfficiencyGain != nil {
			fmt.Fprintf(w, " · efficiency gain %.3f", *s.EfficiencyGain)
		}
		if !s.Qualified && s.Reason != nil {
			fmt.Fprintf(w, " · not qualified: %s", *s.Reason)
		}
		fmt.Fprintln(w)
	}
	if res.Simulated {
		fmt.Fprintf(w, "  note        figures from a simulation (%s)\n", res.GPU)
	}
	fmt.Fprintf(w, "  updated     %s\n", r.UpdatedAt.UTC().Format("2006-01-02 15:04:05Z"))
}

// unquantizedLine says in one line which modules outside the label the
// checkpoint keeps unquantized: how many of each kind, their dtypes and
// bytes, e.g. "1 embedding · 1 lm_head · 9 norms (BF16, 2.0 MiB), outside
// the label". Empty when there are none.
func unquantizedLine(mods []record.UnquantizedModule) string {
	if len(mods) == 0 {
		return ""
	}
	counts := map[string]int{}
	var kinds, dtypes []string
	var bytes int64
	for _, m := range mods {
		if counts[m.Kind] == 0 {
			kinds = append(kinds, m.Kind)
		}
		counts[m.Kind] += m.Count
		if !slices.Contains(dtypes, m.DType) {
			dtypes = append(dtypes, m.DType)
		}
		bytes += m.Bytes
	}
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		name := k
		if counts[k] > 1 && k != "other" && k != "lm_head" {
			name += "s"
		}
		parts[i] = fmt.Sprintf("%d %s", counts[k], name)
	}
	slices.Sort(dtypes)
	return fmt.Sprintf("%s (%s, %s), outside the label", strings.Join(parts, " · "), strings.Join(dtypes, "/"), bundle.HumanSize(bytes))
}

func stageLine(stages []record.Stage) string {
	parts := make([]string, len(stages))
	for i, s := range stages {
		parts[i] = s.Name + " " + s.Status
	}
	return strings.Join(parts, " · ")
}

// maxPatchFiles is how many of a patch's files show prints by name.
const maxPatchFiles = 8

// renderPatch writes the engine patch: its file and digest, what it
// touches, and the engine built from it (the patched tree's digest
// against the pinned source). A patch checked before the engine track
// kept summaries shows its file and digest only; no patch, nothing.
func renderPatch(w io.Writer, p *record.Patch) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "  patch       %s · sha256 %s", p.Path, short(p.SHA256))
	if len(p.Files) > 0 {
		fmt.Fprintf(w, " · %d files, +%d -%d lines", len(p.Files), p.LinesAdded, p.LinesRemoved)
	}
	fmt.Fprintln(w)
	if len(p.Files) > 0 {
		names := p.Files
		more := ""
		if len(names) > maxPatchFiles {
			more = fmt.Sprintf(" and %d more", len(names)-maxPatchFiles)
			names = names[:maxPatchFiles]
		}
		fmt.Fprintf(w, "  touches     %s%s\n", strings.Join(names, ", "), more)
	}
	if p.EngineDigest != "" {
		against := short(p.SourceDigest)
		if p.Revision != "" {
			against = p.Revision + " (" + against + ")"
		}
		fmt.Fprintf(w, "  engine      %s, patched from %s\n", short(p.EngineDigest), against)
	}
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// renderEfficiency writes the efficiency block: per workload the rate and
// peak beside BF16's on the same GPU, their geometric means and E, and
// each budget verdict.
func renderEfficiency(w io.Writer, res record.Result) {
	if res.Efficiency == nil || res.AnchorEfficiency == nil {
		return
	}
	sum, err := formula.Summarize(res.Efficiency, res.AnchorEfficiency, peaks(res.PeakMemory), peaks(res.AnchorPeakMemory))
	if err != nil {
		fmt.Fprintf(w, "  efficiency  unreadable: %v\n", err)
		return
	}
	fmt.Fprintf(w, "  efficiency  speed %.3fx · memory %.3fx · E %.3f · memory saved %.1f%% (serve %.3f GiB vs BF16 %.3f GiB)\n",
		sum.Speed, sum.Memory, sum.Gain, 100*sum.Saved, sum.PeakGiB, sum.BF16PeakGiB)
	for _, wl := range formula.Workloads {
		line := fmt.Sprintf("              %-12s %8.1f tok/s vs %8.1f (x%.3f) · peak %7.3f GiB vs %7.3f (x%.3f)",
			wl.Name, res.Efficiency[wl.Name], res.AnchorEfficiency[wl.Name], sum.Speeds[wl.Name],
			res.PeakMemory[wl.Name].PeakGiB, res.AnchorPeakMemory[wl.Name].PeakGiB, sum.Memories[wl.Name])
		if res.Engine != nil {
			for key, b := range res.Engine.Budget {
				if !strings.HasPrefix(key, wl.Name+"@") {
					continue
				}
				verdict := "held"
				if !b.Healthy {
					verdict = "FAILED"
				}
				line += fmt.Sprintf(" · budget %.3f GiB %s (%g/%g running)", b.BudgetGiB, verdict, b.Running, b.FullRunning)
			}
		}
		fmt.Fprintln(w, line)
	}
	if e := res.Engine; e != nil {
		fmt.Fprintf(w, "              engine: %s KV, %.2f GiB weights, KV pool %.2f GiB (%.0f tokens), stored %.3f GiB",
			e.Startup.KVCacheDType, e.Startup.WeightsGiB, e.Startup.KVCacheGiB, e.Startup.KVCacheTokens, e.StoredGiB)
		if res.GPUHours != nil {
			fmt.Fprintf(w, " · %.4f GPU-hours", *res.GPUHours)
		}
		fmt.Fprintln(w)
	}
}

func peaks(m map[string]record.PeakMemory) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = v.PeakGiB
	}
	return out
}
