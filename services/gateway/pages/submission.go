package pages

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/services/gateway/plot"
)

// Workloads are the efficiency workloads in the order the pages show
// them (the record's serve first, as its workload block).
var Workloads = []string{"serve", "interactive", "long_context"}

// Tier thresholds of the worst domain's one-sided upper bound (the
// quality stage's rule: A at or below 0.03, B at or below 0.05).
const (
	TierA = 0.03
	TierB = 0.05
)

// Submission is the submission page.
type Submission struct {
	Rec record.Submission
	// Simulated says a figure of the result came from a simulation;
	// GPU names the GPU measured or simulated.
	Simulated bool
	GPU       string
	Stages    []StageRow
	// Failure is the stage that failed, with its code and sentence (the
	// sentence without the engine's log tail, which FailureLogTail holds
	// apart).
	Failure *record.Error
	// PatchText is the address of the engine patch's text (GET
	// /v1/submissions/{id}/patch) when the page's viewer may read it (an
	// operator, or the participant who wrote it); empty otherwise.
	PatchText      string
	FailureLogTail string
	Contract       *ContractView
	Efficiency     *EfficiencyView
	Quality        *QualityView
	KL             *record.KL
	Length         *record.Length
	Score          *ScoreView
	Audit          *AuditView
	// Memory holds a plot per engine run of the efficiency job.
	Memory []Figure
	// MemoryNote says why there is no memory plot, or what the plots
	// come from.
	MemoryNote string
	// Absent says, by block (contract, quality, efficiency, score), why
	// it is not there.
	Absent map[string]string
}

// StageRow is one pipeline stage.
type StageRow struct {
	Name, Status, Reason string
	Started, Finished    string
	Took                 string
}

// Figure is an SVG drawn by the server, or why it could not be.
type Figure struct {
	Title string
	SVG   template.HTML
	Err   string
}

// ContractView is the contract block as the page shows it.
type ContractView struct {
	record.Contract
	Declared, Detected string
	// Mismatch says the labels differ; Wider that the detected one is
	// wider than declared (a violation).
	Mismatch    bool
	Unquantized []UnquantizedRow
	Foreign     string
	RopeChanged bool
}

// UnquantizedRow is one unquantized module.
type UnquantizedRow struct {
	Name, Kind, DType, Bytes string
	Count                    int
}

// EfficiencyView is the efficiency table.
type EfficiencyView struct {
	Rows []EfficiencyRow
	// Reason is the first failed budget's sentence, from the score.
	Reason    string
	Speed     string
	Memory    string
	HardCap   bool
	LatencyOK bool
	// ReferenceNote says where the BF16 reference's latencies are.
	ReferenceNote string
	Startup       *record.Startup
}

// EfficiencyRow is one workload.
type EfficiencyRow struct {
	Workload                          string
	Rate, BF16Rate, Speed             string
	TTFTP50, TTFTP99                  string
	TPOTP50, TPOTP99                  string
	BF16TTFTP50, BF16TPOTP50          string
	Requests                          int
	Peak, BF16Peak, MemoryRatio       string
	BudgetGiB, CapGiB, Replay, Budget string
	BudgetHeld                        bool
	HasBudget                         bool
}

// QualityView is the quality table and its figure.
type QualityView struct {
	record.Quality
	Rows   []DomainRow
	Figure Figure
}

// DomainRow is one eval domain.
type DomainRow struct {
	Name                                    string
	Items                                   int
	BF16, Quantized, Drop, SE, Upper, Recov string
	Status                                  string
	Valid                                   bool
	Tier                                    string
}

// ScoreView is the score and why.
type ScoreView struct {
	record.Score
	Value, Gain, Speed, Memory, Drift, MeanDrop, MemorySaved string
	Why                                                      string
}

// AuditView is the engine audits.
type AuditView struct {
	record.Audit
	Rows []AuditRow
}

// AuditRow is one audit's verdict and figures.
type AuditRow struct {
	Name, MLPerf, Verdict, Reason, Message, Figures string
}

// NewSubmission builds the page of a record and the telemetry of its
// efficiency job.
func NewSubmission(rec record.Submission, tel Telemetry) *Submission {
	s := &Submission{Rec: rec, Simulated: rec.Result.Simulated, GPU: rec.Result.GPU, Absent: map[string]string{}}
	if rec.Error != nil {
		f := *rec.Error
		f.Message, s.FailureLogTail = splitLogTail(f.Message)
		s.Failure = &f
	}
	for _, st := range rec.Stages {
		s.Stages = append(s.Stages, StageRow{Name: st.Name, Status: st.Status, Reason: st.Reason, Started: Clock(st.StartedAt),
			Finished: Clock(st.FinishedAt), Took: Between(st.StartedAt, st.FinishedAt)})
	}
	for _, r := range tel.Runs {
		s.Simulated = s.Simulated || r.Simulated
	}
	res := rec.Result
	if c := res.Contract; c != nil {
		s.Contract = contractView(rec, *c)
	} else {
		s.Absent["contract"] = absent(rec, "contract")
	}
	if res.Efficiency != nil || res.PeakMemory != nil {
		s.Efficiency = efficiencyView(res, tel)
	} else {
		s.Absent["efficiency"] = absent(rec, "efficiency")
	}
	if q := res.DevQuality; q != nil {
		s.Quality = qualityView(*q)
	} else {
		s.Absent["quality"] = absent(rec, "quality")
	}
	s.KL = res.KL
	if res.DevQuality != nil {
		l := res.DevQuality.Length
		s.Length = &l
	}
	if d := res.DevScore; d != nil {
		s.Score = scoreView(*d)
	} else {
		s.Absent["score"] = absent(rec, "score")
	}
	if res.Engine != nil && res.Engine.Audit != nil {
		s.Audit = auditView(*res.Engine.Audit)
	}
	s.Memory, s.MemoryNote = memoryFigures(res, tel, s.Simulated)
	if len(s.Memory) == 0 && s.Efficiency == nil && tel.Err == "" {
		s.MemoryNote = "no engine ran for it: " + s.Absent["efficiency"]
	}
	return s
}

// absent says why a stage's block is not in the record.
func absent(rec record.Submission, stage string) string {
	for _, st := range rec.Stages {
		if st.Name != stage {
			continue
		}
		switch st.Status {
		case record.StatusPending:
			return "the " + stage + " stage has not started yet"
		case record.StatusRunning:
			return "the " + stage + " stage is running"
		case record.StatusSkipped:
			switch {
			case rec.Error != nil:
				return "not measured: the " + stage + " stage was skipped because the " + rec.Error.Stage + " stage failed (" + rec.Error.Code + ")"
			case st.Reason != "":
				return "the " + stage + " stage was skipped (" + st.Reason + ")"
			}
			return "the " + stage + " stage was skipped"
		case record.StatusFailed:
			if rec.Error != nil && rec.Error.Stage == stage {
				// The engine's log tail is shown once, under the failure.
				msg, _ := splitLogTail(rec.Error.Message)
				return "the " + stage + " stage failed: " + rec.Error.Code + ": " + msg
			}
			return "the " + stage + " stage failed: " + st.Reason
		case record.StatusDone:
			return "the " + stage + " stage ended without adding this block"
		}
	}
	return "this arena has no " + stage + " stage"
}

func contractView(rec record.Submission, c record.Contract) *ContractView {
	v := &ContractView{Contract: c, Declared: c.DeclaredPrecision, Detected: c.DetectedPrecision}
	if v.Declared == "" {
		v.Declared = rec.Solution.Precision
	}
	if v.Detected == "" {
		v.Detected = rec.Solution.DetectedPrecision
	}
	v.Mismatch = v.Declared != "" && v.Detected != "" && v.Declared != v.Detected
	for _, m := range c.UnquantizedModules {
		v.Unquantized = append(v.Unquantized, UnquantizedRow{Name: m.Name, Kind: m.Kind, DType: m.DType, Bytes: Bytes(m.Bytes), Count: m.Count})
	}
	if c.ForeignTensors.Count > 0 {
		v.Foreign = fmt.Sprintf("%d tensors, %s (%s of tensor bytes)", c.ForeignTensors.Count, Bytes(c.ForeignTensors.Bytes), Percent(c.ForeignTensors.Share, 3))
	}
	v.RopeChanged = c.RopeSource.RopeTheta != c.RopeArtifact.RopeTheta || c.RopeSource.RopeType != c.RopeArtifact.RopeType
	return v
}

func efficiencyView(res record.Result, tel Telemetry) *EfficiencyView { //nolint:gocyclo // a view model: each field with its own case for an absent score, run or measurement
	v := &EfficiencyView{}
	ds := res.DevScore
	if ds != nil {
		v.Speed, v.Memory = FixedP(ds.Speed, 3), FixedP(ds.Memory, 3)
		if !ds.Qualified && ds.Reason != nil && strings.HasPrefix(*ds.Reason, "contract: limited to a hard cap") {
			v.Reason = *ds.Reason
		}
	}
	var cand, ref *Run
	for i := range tel.Runs {
		switch tel.Runs[i].Phase {
		case "candidate":
			cand = &tel.Runs[i]
		case "reference":
			ref = &tel.Runs[i]
		}
	}
	v.LatencyOK = cand != nil && len(cand.Latency) > 0
	switch {
	case ref != nil:
		v.ReferenceNote = "the BF16 reference was measured in this job"
	case res.Engine != nil && res.Engine.Audit != nil && res.Engine.Audit.ReferenceCached:
		v.ReferenceNote = "the BF16 reference's figures come from an earlier job on pod " + res.Engine.Audit.Pod + "; its latencies are that job's"
	}
	if res.Engine != nil {
		v.HardCap = res.Engine.HardCap
		st := res.Engine.Startup
		v.Startup = &st
	}
	for _, w := range Workloads {
		row := EfficiencyRow{Workload: w, Rate: Dash, BF16Rate: Dash, Speed: Dash, TTFTP50: Dash, TTFTP99: Dash, TPOTP50: Dash, TPOTP99: Dash,
			BF16TTFTP50: Dash, BF16TPOTP50: Dash, Peak: Dash, BF16Peak: Dash, MemoryRatio: Dash, BudgetGiB: Dash, CapGiB: Dash, Replay: Dash, Budget: Dash}
		rate, hasRate := res.Efficiency[w]
		if hasRate {
			row.Rate = Fixed(rate, 1)
		}
		if b, ok := res.AnchorEfficiency[w]; ok {
			row.BF16Rate = Fixed(b, 1)
		}
		if ds != nil {
			if sp, ok := ds.Speeds[w]; ok {
				row.Speed = Ratio(sp)
			}
			if m, ok := ds.Memories[w]; ok {
				row.MemoryRatio = Ratio(m)
			}
		}
		if row.Speed == Dash && hasRate && res.AnchorEfficiency[w] > 0 {
			row.Speed = Ratio(rate / res.AnchorEfficiency[w])
		}
		if p, ok := res.PeakMemory[w]; ok {
			row.Peak = GiB(p.PeakGiB)
		}
		if p, ok := res.AnchorPeakMemory[w]; ok {
			row.BF16Peak = GiB(p.PeakGiB)
			if row.MemoryRatio == Dash && res.PeakMemory[w].PeakGiB > 0 {
				row.MemoryRatio = Ratio(p.PeakGiB / res.PeakMemory[w].PeakGiB)
			}
		}
		if cand != nil {
			if l, ok := cand.Latency[w]; ok && l.Requests > 0 {
				row.Requests = l.Requests
				row.TTFTP50, row.TTFTP99 = Fixed(l.TTFTP50, 1), Fixed(l.TTFTP99, 1)
				if l.TPOTRequests > 0 {
					row.TPOTP50, row.TPOTP99 = Fixed(l.TPOTP50, 2), Fixed(l.TPOTP99, 2)
				}
			}
		}
		if ref != nil {
			if l, ok := ref.Latency[w]; ok && l.Requests > 0 {
				row.BF16TTFTP50 = Fixed(l.TTFTP50, 1)
				if l.TPOTRequests > 0 {
					row.BF16TPOTP50 = Fixed(l.TPOTP50, 2)
				}
			}
		}
		if res.Engine != nil {
			for key, b := range res.Engine.Budget {
				if name, _, _ := strings.Cut(key, "@"); name != w {
					continue
				}
				row.HasBudget, row.BudgetHeld = true, b.Healthy
				row.BudgetGiB, row.CapGiB = GiB(b.BudgetGiB), GiB(b.CapGiB)
				row.Budget = budgetVerdict(b, rate, hasRate)
				if b.Value != nil {
					row.Replay = Fixed(*b.Value, 1)
				}
			}
		}
		v.Rows = append(v.Rows, row)
	}
	return v
}

// budgetVerdict says what the replay under the budget did, in the
// replay rule's terms: all requests at once, and 90% of the rate.
func budgetVerdict(b record.Budget, rate float64, hasRate bool) string {
	held := fmt.Sprintf("ran %s of %s requests at once", Fixed(b.Running, 0), Fixed(b.FullRunning, 0))
	kept := "served nothing"
	if b.Value != nil && hasRate && rate > 0 {
		kept = "kept " + Percent(*b.Value/rate, 1) + " of its rate"
	}
	if b.Healthy {
		return "held: " + held + ", " + kept
	}
	return "failed: " + held + ", " + kept + " (needs all at once and 90%)"
}

func qualityView(q record.Quality) *QualityView {
	v := &QualityView{Quality: q}
	names := make([]string, 0, len(q.Domains))
	for n := range q.Domains {
		names = append(names, n)
	}
	sort.Strings(names)
	var bars []plot.Bar
	for _, n := range names {
		d := q.Domains[n]
		tier := "fail"
		switch {
		case d.Upper <= TierA:
			tier = "A"
		case d.Upper <= TierB:
			tier = "B"
		}
		v.Rows = append(v.Rows, DomainRow{Name: n, Items: d.Items, BF16: Fixed(d.BF16, 4), Quantized: Fixed(d.Quantized, 4), Drop: Fixed(d.Drop, 4),
			SE: Fixed(d.SE, 4), Upper: Fixed(d.Upper, 4), Recov: Fixed(d.Recovery, 4), Status: d.Status, Valid: d.Status == "valid", Tier: tier})
		bars = append(bars, plot.Bar{Label: n, Value: d.Drop, Upper: d.Upper, HasUpper: true, Muted: d.Status != "valid"})
	}
	svg, err := plot.Bars{Title: "Drop against BF16, with its one-sided 95% upper bound", ID: "quality-plot",
		X:     plot.Axis{Label: "drop (share of items) · bar: drop · tick: drop + 1.645 se · grey: diagnostic, not counted"},
		Bars:  bars,
		Rules: []plot.Rule{{At: TierA, Label: "tier A ≤ 0.03", Kind: plot.RuleTier}, {At: TierB, Label: "tier B ≤ 0.05", Kind: plot.RuleTier}},
	}.SVG()
	v.Figure = figure("quality", svg, err)
	return v
}

func scoreView(d record.Score) *ScoreView {
	v := &ScoreView{Score: d, Value: Fixed(d.Score, 4), Gain: FixedP(d.EfficiencyGain, 4), Speed: FixedP(d.Speed, 4), Memory: FixedP(d.Memory, 4),
		Drift: FixedP(d.Drift, 4), MeanDrop: FixedP(d.MeanDrop, 4), MemorySaved: Dash}
	if d.MemorySaved != nil {
		v.MemorySaved = Percent(*d.MemorySaved, 1)
	}
	switch {
	case d.Reason != nil && *d.Reason != "":
		v.Why = *d.Reason
	case d.EfficiencyGain != nil && d.Drift != nil:
		v.Why = fmt.Sprintf("log10(E) × max(0, 1 − D/3) with E = %s and D = %s", Fixed(*d.EfficiencyGain, 4), Fixed(*d.Drift, 4))
	}
	return v
}

func auditView(a record.Audit) *AuditView {
	v := &AuditView{Audit: a}
	if m := a.ServedModel; m != nil {
		v.Rows = append(v.Rows, AuditRow{Name: "served model", MLPerf: m.MLPerf, Verdict: m.Verdict, Reason: m.Reason, Message: m.Message,
			Figures: fmt.Sprintf("served %q for the folder %q; %d of %d probes agreed (needs %s)", m.ServedModel, m.Checkpoint, m.Agreed, m.Probes, Percent(m.MinAgreement, 0))})
	}
	if m := a.TokenHonesty; m != nil {
		v.Rows = append(v.Rows, AuditRow{Name: "token honesty", MLPerf: m.MLPerf, Verdict: m.Verdict, Reason: m.Reason, Message: m.Message,
			Figures: fmt.Sprintf("%d requests: %d tokens claimed, %d re-tokenised (ratio %s, tolerance %s); %d past max_tokens, %d ended early",
				m.Requests, m.Claimed, m.Retokenized, Fixed(m.Ratio, 3), Percent(m.Tolerance, 0), m.OverMax, m.EndedEarly)})
	}
	if m := a.AnswerCache; m != nil {
		v.Rows = append(v.Rows, AuditRow{Name: "answer cache", MLPerf: m.MLPerf, Verdict: m.Verdict, Reason: m.Reason, Message: m.Message,
			Figures: fmt.Sprintf("repeats decode at %s ms per token, unique prompts at %s: ratio %s (fails below %s)",
				Fixed(m.RepeatTPOTMs, 2), Fixed(m.UniqueTPOTMs, 2), Fixed(m.Ratio, 3), Fixed(m.Limit, 2))})
	}
	if m := a.AccuracyUnderLoad; m != nil {
		v.Rows = append(v.Rows, AuditRow{Name: "accuracy under load", MLPerf: m.MLPerf, Verdict: m.Verdict, Reason: m.Reason, Message: m.Message,
			Figures: fmt.Sprintf("%d items, %d compared, agreement %s; accuracy %s in the quality job, %s under load: drop %s ± %s, lower bound %s (fails above 0)",
				m.Items, m.Compared, Percent(m.Agreement, 1), Fixed(m.QualityAccuracy, 4), Fixed(m.LoadAccuracy, 4), Fixed(m.Drop, 4), Fixed(m.SE, 4), Fixed(m.Lower, 4))})
	}
	return v
}

// memoryFigures draws each engine run's GPU memory, with the budget and
// the hard cap on the replays run under them.
func memoryFigures(res record.Result, tel Telemetry, simulated bool) ([]Figure, string) {
	if tel.Err != "" {
		return nil, tel.Err
	}
	note := ""
	if simulated {
		note = "simulated: " + nonEmpty(res.GPU, "a simulated GPU")
	}
	var out []Figure
	for _, r := range tel.Runs {
		if len(r.Samples) == 0 {
			continue
		}
		pts := make([]plot.Point, 0, len(r.Samples))
		for _, x := range Thin(r.Samples, 400) {
			pts = append(pts, plot.Point{X: x.Seconds, Y: x.GiB})
		}
		peak := 0.0
		for _, x := range r.Samples {
			peak = math.Max(peak, x.GiB)
		}
		c := plot.Lines{ID: "memory-" + r.Phase, X: plot.Axis{Label: "seconds since the engine's first sample"}, Y: plot.Axis{Label: "GiB in use", FromZero: true},
			Series: []plot.Series{{Name: "GPU memory in use", Points: pts}}, Width: 560, Height: 250}
		if r.Simulated {
			c.Note = note
			if c.Note == "" {
				c.Note = "simulated GPU"
			}
		}
		switch {
		case r.Phase == "candidate":
			c.Title = fmt.Sprintf("Measured run: peak %s", GiB(peak))
		case r.Phase == "reference":
			c.Title = fmt.Sprintf("BF16 reference: peak %s", GiB(peak))
		default:
			c.Title = fmt.Sprintf("Budget replay %s: peak %s", r.Phase, GiB(peak))
			if res.Engine != nil {
				if b, ok := res.Engine.Budget[r.Phase]; ok {
					c.Rules = []plot.Rule{{At: b.BudgetGiB, Label: "budget " + GiB(b.BudgetGiB), Kind: plot.RuleBudget},
						{At: b.CapGiB, Label: "hard cap " + GiB(b.CapGiB), Kind: plot.RuleCap}}
				}
			}
		}
		svg, err := c.SVG()
		out = append(out, figure(c.Title, svg, err))
	}
	if len(out) == 0 {
		return nil, "the store holds no GPU samples of this submission's efficiency job (not measured, or measured before the store kept them)"
	}
	return out, ""
}

func figure(title, svg string, err error) Figure {
	if err != nil {
		return Figure{Title: title, Err: "not drawn: " + err.Error()}
	}
	return Figure{Title: title, SVG: template.HTML(svg)} // #nosec: plot escapes every text
}

func nonEmpty(s, or string) string {
	if s == "" {
		return or
	}
	return s
}
