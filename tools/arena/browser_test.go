package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
)

// EnvRequireBrowser makes a missing Chromium a failure of the browser
// test instead of a skip (make test sets it; make deps installs Debian's
// chromium-headless-shell).
const EnvRequireBrowser = "LOWBARENA_REQUIRE_BROWSER"

// EnvScreenshots is where the browser test saves its screenshots
// (default .data/screenshots at the repository's root).
const EnvScreenshots = "LOWBARENA_SCREENSHOTS"

// chromium finds Debian's headless Chromium (or LOWBARENA_CHROMIUM).
func chromium() string {
	if p := os.Getenv("LOWBARENA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium-headless-shell", "chromium", "/usr/lib/chromium/chromium-headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser is a headless Chromium tab with its console's errors.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
	mu   sync.Mutex
	errs []chromedp.ConsoleMessage
}

func newBrowser(t *testing.T, exe, base, dir string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1440, 1000))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	b := &browser{t: t, ctx: ctx, base: base, dir: dir}
	require.NoError(t, chromedp.Do(ctx), "start %s", exe)
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errs = append(b.errs, m)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func (b *browser) open(path string) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, chromedp.Navigate(b.base+path)), path)
}

// js evaluates an expression and returns its value as a string.
func (b *browser) js(expr string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`String(`+expr+`)`))
	require.NoError(b.t, err, expr)
	return v
}

// text is the text of the first element sel matches ("" for none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	return strings.TrimSpace(b.js(`(document.querySelector(` + quoteJS(sel) + `) || {textContent: ""}).textContent`))
}

// waitFor waits, within d, until the expression is true in the page.
func (b *browser) waitFor(expr string, d time.Duration, what string) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	var err error
	for {
		// A navigation under way (a click on a link) destroys the page's
		// context mid-poll: poll again in the new one.
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		ctx, cancel := context.WithTimeout(b.ctx, left+5*time.Second)
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(left), chromedp.WithPollingInterval(200*time.Millisecond)))
		cancel()
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		if png, serr := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)); serr == nil {
			_ = os.WriteFile(filepath.Join(b.dir, "failed-"+strings.NewReplacer(" ", "-", "/", "-").Replace(what)+".png"), png, 0o644)
		}
		page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.location.href + "\n" + (document.body ? document.body.innerText : "")`))
		b.t.Fatalf("%s: not within %s (%v); the page reads:\n%s", what, d, err, page)
	}
}

// shot saves a screenshot of the whole page as DIR/name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644))
}

// consoleErrors are the errors the pages wrote to the console, less
// the document loads expected to answer 404: a page for an unknown id,
// and the public's first paint of a dev record's page (a browser sends
// no token with a document request; the tab's script draws the page
// again with its token, and those requests answer 200).
func (b *browser) consoleErrors(expected ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
next:
	for _, m := range b.errs {
		for _, u := range expected {
			if m.Source == "network" && m.URL == b.base+u {
				continue next
			}
		}
		out = append(out, fmt.Sprintf("%s (%s %s)", m.String(), m.Source, m.URL))
	}
	return out
}

func quoteJS(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestPagesInABrowser drives Debian's headless Chromium against a running
// arena with example submissions and a round: each page renders the
// records' real figures, a submission appears and moves through its
// stages without a reload, a broken contract shows each violation, a
// round is followed live to its end, the pages draw without script, and
// nothing is written to the console. Screenshots of each page go to
// .data/screenshots for people to look at.
func TestPagesInABrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		if os.Getenv(EnvRequireBrowser) == "1" {
			t.Fatalf("no Chromium: make deps installs Debian's chromium-headless-shell (or set LOWBARENA_CHROMIUM)")
		}
		t.Skip("no Chromium (make deps installs Debian's chromium-headless-shell); set " + EnvRequireBrowser + "=1 to fail instead")
	}
	shots := os.Getenv(EnvScreenshots)
	if shots == "" {
		shots = filepath.Join("..", "..", ".data", "screenshots")
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	data := t.TempDir()
	t.Setenv(app.EnvNATSCreds, filepath.Join(credentialsDir(data), access.Operator+".nk"))
	up := startUp(t, data)
	opr := arena(t, "operator", "add", "pages-ops", "--nats", up.natsURL)
	require.Equal(t, 0, opr.code, opr.stderr)
	token := lastWord(opr.stdout)
	b := newBrowser(t, exe, "http://"+up.http, shots)

	// The live page, as the operator (the token in the address's
	// fragment, kept by the tab); then a submission appears on it.
	b.open("/#token=" + token)
	b.waitFor(`document.getElementById("status").textContent.startsWith("live, as pages-ops")`, 30*time.Second, "the live page follows as the operator")
	submit := func(bundle string) string {
		r := arena(t, "submit", bundle, "--nats", up.natsURL)
		require.Equal(t, 0, r.code, r.stderr)
		return lastWord(r.stdout)
	}
	id := submit(bundleDir("fp8-w8a8"))
	// Two more for the round: INT4 (its tier varies; often fail) and an
	// engine that cheats under load (an audit disqualifies it).
	int4 := submit(bundleDir("int4-w4a16-g32"))
	cheat := submit(bundleDir("engine-fast-path"))
	broken := submit(bundleDir("bf16-declared-w4"))
	pickled := t.TempDir()
	require.NoError(t, os.CopyFS(pickled, os.DirFS(bundleDir("int4-w4a16-g32"))))
	require.NoError(t, os.WriteFile(filepath.Join(pickled, "pytorch_model.bin"), []byte("\x80\x04 a pickle"), 0o644))
	unbuilt := submit(pickled)
	// And one whose patched engine dies at start-up: its contract holds,
	// so it enters the round, where its engine dies and the round page
	// shows the disqualification with the engine's log tail, as the
	// fixture's round page does.
	crashing := t.TempDir()
	require.NoError(t, os.CopyFS(crashing, os.DirFS(bundleDir("engine-fast-path"))))
	require.NoError(t, os.WriteFile(filepath.Join(crashing, examples.PatchFile), []byte(crashPatch), 0o644))
	crasher := submit(crashing)
	row := `tr[data-submission="` + id + `"]`
	b.waitFor(`!!document.querySelector('`+row+`')`, 30*time.Second, "the submission appears on the live page")
	b.shot("live")

	// Its page, opened from the live list, moves through its stages
	// without a reload: page.js draws the server's page again as the
	// record changes. The tab keeps a mark a reload would wipe.
	// The live list redraws as submissions arrive (newest first), so a
	// click at the coordinates of a row can land on another: the link is
	// clicked in the page itself, and again if the first did not
	// navigate (a redraw replaced it mid-click).
	opened := `location.pathname === "/submissions/` + id + `"`
	for attempt := 0; attempt < 3; attempt++ {
		// Errors are ignored here: a navigation under way destroys the
		// page's context mid-call, and the poll below decides.
		_, _ = chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(function(){ if (`+opened+`) { return true; } const a = document.querySelector('`+row+` a'); if (a) { a.click(); } return !!a; })()`))
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](opened, chromedp.WithPollingTimeout(8*time.Second), chromedp.WithPollingInterval(200*time.Millisecond)))
		cancel()
		if err == nil {
			break
		}
	}
	b.waitFor(opened+` && !!document.getElementById("record-status")`, 30*time.Second, "the submission's page")
	b.js(`window.lowbarenaMark = "no reload"`)
	stages := `Array.from(document.querySelectorAll("tr[data-stage]")).map(r => r.dataset.stage + ":" + r.dataset.status).join(" ")`
	seen := map[string]bool{}
	var order []string
	deadline := time.Now().Add(5 * time.Minute)
	for {
		s := b.js(stages)
		if !seen[s] {
			seen[s] = true
			order = append(order, s)
		}
		if regexp.MustCompile(`score:(done|skipped)`).MatchString(s) && b.text("#record-status") != "running" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the submission did not end within 5 minutes; stages seen: %v", order)
		time.Sleep(250 * time.Millisecond)
	}
	require.Equal(t, "no reload", b.js(`window.lowbarenaMark`), "the page was drawn again in place, never reloaded")
	require.GreaterOrEqual(t, len(order), 3, "the stages moved on the open page: %v", order)
	require.NotEqual(t, "0", b.js(`document.getElementById("main").dataset.draws || 0`))

	// The submission's page holds the record's real figures.
	rec, _ := showJSON(t, up.natsURL, id)
	require.Equal(t, record.StatusDone, rec.Status, "%+v", rec.Error)
	b.waitFor(`!!document.querySelector('svg[id="memory-serve@1.02"]')`, 30*time.Second, "the memory plots")
	for _, w := range []string{"serve", "interactive", "long_context"} {
		tr := `tr[data-workload="` + w + `"]`
		require.Equal(t, fmt.Sprintf("%.1f", rec.Result.Efficiency[w]), b.text(tr+" .rate"), w)
		require.Equal(t, fmt.Sprintf("%.3f GiB", rec.Result.PeakMemory[w].PeakGiB), b.text(tr+" .peak"), w)
		require.Regexp(t, `^[0-9]+\.[0-9]`, b.text(tr+" .ttft"), "%s: TTFT from the store's requests", w)
		budget := rec.Result.Engine.Budget[w+"@1.02"]
		verdict := map[bool]string{true: "held ", false: "failed "}[budget.Healthy]
		require.True(t, strings.HasPrefix(b.text(tr+" .budget"), verdict), "%s: the replay's verdict is the record's (%s)", w, verdict)
		svg := `svg[id="memory-` + w + `@1.02"]`
		require.Equal(t, "true", b.js(fmt.Sprintf(`!!document.querySelector('%s g.rule.budget[data-at="%v"]')`, svg, budget.BudgetGiB)), "%s: the budget drawn at %v", w, budget.BudgetGiB)
		require.Equal(t, "true", b.js(fmt.Sprintf(`!!document.querySelector('%s g.rule.cap[data-at="%v"]')`, svg, budget.CapGiB)), "%s: the hard cap drawn at %v", w, budget.CapGiB)
	}
	for name, d := range rec.Result.DevQuality.Domains {
		require.Equal(t, fmt.Sprintf("%.4f", d.Upper), b.text(`tr[data-domain="`+name+`"] .upper`), name)
	}
	require.Equal(t, fmt.Sprintf("%.4f", rec.Result.DevScore.Score), b.text("#score-value"))
	require.Equal(t, rec.Solution.DetectedPrecision, b.text("#detected"))
	require.Equal(t, rec.Result.Engine.Audit.Verdict, b.text("#audit-verdict"))
	require.Contains(t, b.text("#simulated"), "simulated", "every figure from a simulation says so")
	require.Contains(t, b.text(`svg[id="memory-candidate"] .note`), "simulated")
	b.shot("submission")

	// A broken contract shows each of its violations.
	bad, _ := showJSON(t, up.natsURL, broken)
	require.Equal(t, "contract", bad.Error.Stage)
	require.NotEmpty(t, bad.Result.Contract.Violations)
	b.open("/submissions/" + broken)
	b.waitFor(`!!document.getElementById("failure")`, 30*time.Second, "the broken contract's page")
	require.Equal(t, "broken", b.text("#contract-verdict"))
	for _, v := range bad.Result.Contract.Violations {
		require.Equal(t, v.Code+": "+v.Message, b.text(`li[data-code="`+v.Code+`"]`))
	}
	require.Contains(t, b.text("#quality"), "not measured: the quality stage was skipped because the contract stage failed (precision_wider_than_declared)")
	b.shot("contract-broken")

	// A bundle the build refused.
	b.open("/submissions/" + unbuilt)
	b.waitFor(`(document.getElementById("failure") || {textContent: ""}).textContent.includes("bundle_unsafe_file")`, 60*time.Second, "the refused build's page")
	b.shot("build-refused")

	// A round of the three, once they are scored, started as the
	// end-to-end test does and followed live on its page from its first
	// steps to its end.
	cands := []string{id, int4, cheat, crasher}
	for _, c := range cands[1:] {
		require.Eventually(t, func() bool {
			r, _ := showJSON(t, up.natsURL, c)
			return r.Status != record.StatusRunning
		}, 5*time.Minute, time.Second, "%s ends", c)
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rcmd := exec.CommandContext(rctx, arenaBin, "round", "start", "--campaign", examples.TaskID, "--candidates", strings.Join(cands, ","), "--wait", "--nats", up.natsURL)
	rerr, err := rcmd.StderrPipe()
	require.NoError(t, err)
	rcmd.Stdout = io.Discard
	require.NoError(t, rcmd.Start())
	sc := bufio.NewScanner(rerr)
	var roundID string
	for sc.Scan() {
		if m := regexp.MustCompile(`arena watch --round (\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			roundID = m[1]
			break
		}
	}
	require.NotEmpty(t, roundID, "arena round start names its round")
	go func() { _, _ = io.Copy(io.Discard, rerr) }()
	b.open("/rounds/" + roundID)
	b.waitFor(`!!document.getElementById("round-status")`, 30*time.Second, "the round's page")
	b.js(`window.lowbarenaMark = "no reload"`)
	b.waitFor(`document.getElementById("round-status").textContent === "running" && document.querySelectorAll('li.step[data-status="done"]').length >= 4`, time.Minute, "the round's first steps")
	b.shot("round-running")
	b.waitFor(`document.getElementById("round-status").textContent === "complete"`, 4*time.Minute, "the round completes on its open page")
	require.NoError(t, rcmd.Wait(), "arena round start --wait")
	require.Equal(t, "no reload", b.js(`window.lowbarenaMark`))
	// The page's figures are the round view's, as the API serves it.
	var view struct {
		Result struct {
			TopScore *float64 `json:"top_score"`
			Leader   string   `json:"leader"`
			Drift    float64  `json:"drift"`
			Entries  []struct {
				EntryID string   `json:"entry_id"`
				Status  string   `json:"status"`
				Score   *float64 `json:"score"`
				Reason  string   `json:"reason"`
			} `json:"entries"`
		} `json:"result"`
		Steps []struct {
			Status string `json:"status"`
			Rates  map[string]float64
		} `json:"steps"`
	}
	resp, err := http.Get("http://" + up.http + "/v1/rounds/" + roundID)
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&view))
	resp.Body.Close()
	switch {
	case view.Result.TopScore != nil:
		require.Equal(t, fmt.Sprintf("%.4f", *view.Result.TopScore), b.text("#top-score"))
		require.Contains(t, b.text("#leader-note"), "changed: won by "+view.Result.Leader)
	default: // no entry qualified (the FP8 example's tier varies from run to run)
		require.Equal(t, "—", b.text("#top-score"))
		require.Contains(t, b.text("#leader-note"), "none: no entry scored")
	}
	require.Equal(t, fmt.Sprintf("%.2f%%", 100*view.Result.Drift), b.text("#drift"))
	disq := 0
	for _, e := range view.Result.Entries {
		entry := "baseline"
		for i, c := range cands {
			if e.EntryID == c {
				entry = fmt.Sprintf("candidate-%d", i+1)
			}
		}
		tr := `tr[data-entry="` + entry + `"]`
		require.Equal(t, e.Status, b.js(`document.querySelector('`+tr+`').dataset.status`), entry)
		if e.Score != nil {
			require.Equal(t, fmt.Sprintf("%.4f", *e.Score), b.text(tr+" .score"), entry)
		}
		if e.Status == "disqualified" {
			disq++
			require.Contains(t, b.text(`article.disq[data-entry="`+entry+`"]`), strings.SplitN(e.Reason, "; container log tail: ", 2)[0], entry)
		}
		if e.EntryID == crasher {
			// Its engine never answered: no speeds, and the log tail
			// apart from the reason, as the engine wrote it.
			require.Equal(t, "disqualified", e.Status, e.Reason)
			require.Contains(t, e.Reason, "; container log tail: ")
			require.Contains(t, b.text(`article.disq[data-entry="`+entry+`"] pre.logtail`), crashLine)
			require.Equal(t, "—", b.text(tr+" .speeds"), entry)
			continue
		}
		if entry != "baseline" {
			require.Equal(t, "example-team", b.text(tr+` a[href^="/participants/"]`), entry)
			require.Regexp(t, `^\d+\.\d\d× · \d+\.\d\d× · \d+\.\d\d×$`, b.text(tr+" .speeds"), "%s: in-round speeds against the baseline", entry)
		}
	}
	require.Positive(t, disq, "the cheat is disqualified in the round: %+v", view.Result.Entries)
	counts := fmt.Sprintf("%d scored · %d disqualified", len(view.Result.Entries)-disq, disq)
	require.Equal(t, counts, b.text("#entries-count"))
	require.Equal(t, "1.00× · 1.00× · 1.00×", b.text(`tr[data-entry="baseline"] .speeds`))
	require.Equal(t, fmt.Sprint(len(view.Steps)), b.js(`document.querySelectorAll("li.step").length`))
	require.Equal(t, "0", b.js(`document.querySelectorAll('li.step .recorded').length - Array.from(document.querySelectorAll('li.step .recorded')).filter(e => e.textContent.endsWith("UTC")).length`),
		"every step has the time it was recorded")
	require.Contains(t, b.text("#run"), "Setup 4/4")
	require.Contains(t, b.text("#run"), "Teardown 1/1")
	b.shot("round")

	// The submission whose engine died: its failure with the engine's log
	// tail apart, as the record has it.
	crashRec, _ := showJSON(t, up.natsURL, crasher)
	require.Equal(t, record.StatusFailed, crashRec.Status)
	require.NotNil(t, crashRec.Error)
	b.open("/submissions/" + crasher)
	b.waitFor(`!!document.querySelector("#failure pre.logtail")`, 30*time.Second, "the crashed engine's failure and log tail")
	require.Contains(t, b.text("#failure"), "Failed at the "+crashRec.Error.Stage+" stage")
	require.Contains(t, crashRec.Error.Message, "; container log tail: ")
	require.Contains(t, b.text("#failure pre.logtail"), crashLine)
	// Its engine patch, and its text for the operator, fetched with the
	// tab's token and shown under the summary.
	require.Contains(t, b.text("#patch"), examples.PatchFile)
	b.waitFor(`!!document.querySelector("#patch-text")`, 30*time.Second, "the link to the patch's text")
	b.js(`document.getElementById("patch-text").click(), ""`)
	b.waitFor(`!!document.querySelector("#patch-text-body")`, 30*time.Second, "the patch's text")
	require.Equal(t, crashPatch, b.js(`document.getElementById("patch-text-body").textContent`))
	b.shot("engine-crashed")

	// The leaderboard and the participant's history.
	b.open("/leaderboard?campaign=" + examples.TaskID)
	b.waitFor(`!!document.querySelector('tr[data-submission="`+id+`"]')`, 30*time.Second, "the leaderboard's row")
	require.Equal(t, fmt.Sprintf("%.4f", rec.Result.DevScore.Score), b.text(`tr[data-submission="`+id+`"] .score`))
	// The examples ran on the simulated engine: the page says so, row by row.
	require.True(t, rec.Result.Simulated, "the examples run on simengine")
	require.Contains(t, b.text("#simulated"), "come from a simulated engine on ")
	require.Contains(t, b.text("#simulated"), nonEmptyGPU(rec.Result.GPU))
	require.Equal(t, "sim", b.text(`tr[data-submission="`+id+`"] .simtag`))
	b.shot("leaderboard")
	b.open("/participants/example-team")
	b.waitFor(`!!document.querySelector('#history-figure svg g.series circle')`, 30*time.Second, "the history plot")
	require.Equal(t, "true", b.js(fmt.Sprintf(`!!document.querySelector('g.series[data-name=%s]')`, quoteJS(rec.Solution.Method))), "a line for the method")
	require.Contains(t, b.text("#simulated"), "come from a simulated engine")
	b.shot("history")

	// A page for an unknown id says what is not there.
	const unknown = "/submissions/0000000000000000"
	b.open(unknown)
	b.waitFor(`!!document.querySelector(".problem")`, 10*time.Second, "the 404 page")
	require.Contains(t, b.text("h1"), "No submission 0000000000000000")
	require.Equal(t, "submission_not_found", b.js(`document.querySelector(".problem").dataset.code`))
	b.shot("not-found")

	// Without script, the round's page is whole at its first paint.
	require.NoError(t, chromedp.Do(b.ctx, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return chromedp.Void{}, err
	}))
	b.open("/rounds/" + roundID)
	b.waitFor(`!!document.getElementById("round-status")`, 10*time.Second, "the round's page without script")
	require.Equal(t, "static: scripts are off or have not run", b.text("#live-status"))
	require.Equal(t, counts, b.text("#entries-count"))
	b.shot("round-without-script")

	require.Empty(t, b.consoleErrors(unknown, "/submissions/"+id, "/submissions/"+crasher, "/submissions/"+broken, "/submissions/"+unbuilt, "/participants/example-team"),
		"the console of every page")
	up.stop(t)
}

// nonEmptyGPU is how a page of scores names a record's simulated GPU.
func nonEmptyGPU(gpu string) string {
	if gpu == "" {
		return "a simulated GPU"
	}
	return gpu
}

// crashLine is what crashPatch's engine writes to its log as it dies:
// the pages show it in the log tail apart from the reason.
const crashLine = "the patch's crash"

// crashPatch is an engine patch against the example campaign's pinned
// simengine source whose engine dies before it serves, with a line in its
// log.
const crashPatch = `diff --git a/tools/simengine/crash.go b/tools/simengine/crash.go
new file mode 100644
--- /dev/null
+++ b/tools/simengine/crash.go
@@ -0,0 +1,11 @@
+package main
+
+import (
+	"fmt"
+	"os"
+)
+
+func init() {
+	fmt.Fprintln(os.Stderr, "ERROR EngineCore failed to start: RuntimeError: Engine core initialization failed (the patch's crash)")
+	os.Exit(1)
+}
`
