//go:build embedded

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/ce"
	"github.com/lowbarena/lowbarena/events/ctl"
	"github.com/lowbarena/lowbarena/services/domain/examples"
	"github.com/lowbarena/lowbarena/services/domain/record"
)

// cmdDemo is what `make run` does: start the arena, submit the bundled
// examples, wait until every stage that a running service handles has
// ended for each, print the records, and keep serving (unless --exit) so
// that `arena watch` and `arena show` can be used from another terminal.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	var o upOptions
	o.register(fs)
	exit := fs.Bool("exit", false, "stop once the results are printed")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait for each submission")
	bundles, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(bundles) == 0 {
		// No bundles: the examples, written afresh (they are
		// deterministic, so a second demo submits the same digests).
		dir := filepath.Join(o.data, "examples")
		exs, err := writeExamples(dir)
		if err != nil {
			return err
		}
		for _, ex := range exs {
			bundles = append(bundles, ex.Dir)
		}
		if o.campaigns == "" {
			o.campaigns = filepath.Join(dir, examples.CampaignsDir)
		}
		fmt.Fprintf(stdout, "wrote %d example bundles and their campaign to %s\n", len(exs), dir)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	a, err := startArena(runCtx, o, stderr)
	if err != nil {
		return err
	}
	err = demo(runCtx, a, bundles, *timeout, stdout, stderr)
	if err != nil || *exit {
		stop()
		if werr := a.wait(); err == nil {
			err = werr
		}
		return err
	}
	fmt.Fprintf(stdout, "\narena up: NATS %s · HTTP http://%s · data %s\n", a.natsURL, a.httpAddr, a.data)
	fmt.Fprintf(stdout, "in another terminal: arena watch --all · arena show ID --json (Ctrl-C stops)\n")
	return a.wait()
}

func demo(ctx context.Context, a *arenaProc, bundles []string, timeout time.Duration, stdout, stderr io.Writer) error {
	c, err := dial(ctx, a.natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	fmt.Fprintf(stdout, "stages served by this arena: %s\n", servedLine(a.stages))
	// GPU jobs take a while: show the runners' progress as it happens.
	sub, err := c.nc.Subscribe(events.SubjectRootArena+".runner.job.>", func(m *nats.Msg) {
		fmt.Fprintln(stdout, jobLine(m))
	})
	if err == nil {
		defer func() { _ = sub.Unsubscribe() }()
	}
	ids := make([]string, len(bundles))
	for i, dir := range bundles {
		if ids[i], err = submitDir(ctx, c, dir, stderr); err != nil {
			return fmt.Errorf("submit %s: %w", dir, err)
		}
		fmt.Fprintf(stdout, "submitted %s as %s\n", dir, ids[i])
	}
	recs := make([]*record.Submission, len(ids))
	for i, id := range ids {
		rec, err := waitFor(ctx, c, id, timeout, func(r *record.Submission) bool { return settled(r, a.stages) }, io.Discard)
		if err != nil {
			return err
		}
		recs[i] = rec
		fmt.Fprintf(stdout, "\n%s\n", bundles[i])
		renderRecord(stdout, rec)
	}
	// A round on the entries that kept their contracts: the leader of the
	// campaign comes out of it.
	var entrants []string
	var camp string
	for i, id := range ids {
		if recs[i] != nil && recs[i].Result.Contract != nil && recs[i].Result.Contract.OK && len(entrants) < 5 {
			entrants, camp = append(entrants, id), recs[i].TaskID
		}
	}
	if len(entrants) > 0 && slices.Contains(a.stages, "score") {
		rid, err := startRound(ctx, a.natsURL, ctl.StartRequest{Campaign: camp, Candidates: entrants})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nround %s on %d candidates:\n", rid, len(entrants))
		if err := cmdWatch(ctx, []string{"--round", rid, "--nats", a.natsURL}, stdout, io.Discard); err != nil {
			return err
		}
	}
	if slices.Contains(a.stages, "score") {
		rows, err := ask(ctx, a.natsURL, ctl.SubjectLeaderboard, ctl.Query{}, 30*time.Second)
		if err != nil {
			return fmt.Errorf("leaderboard: %w", err)
		}
		fmt.Fprintf(stdout, "\nleaderboard (lowb-score/v1; dev submissions are never ranked):\n")
		if err := printRows(stdout, rows, false); err != nil {
			return err
		}
	}
	return nil
}

// settled reports whether a record has gone as far as this arena can take
// it: it ended, or every stage a running service handles has ended.
func settled(r *record.Submission, served []string) bool {
	if r.Status != record.StatusRunning {
		return true
	}
	for _, s := range r.Stages {
		if slices.Contains(served, s.Name) && (s.Status == record.StatusPending || s.Status == record.StatusRunning) {
			return false
		}
	}
	return true
}

// jobLine is one line of runner progress for people, from a runner.job
// event (its data is the payload; its type is a header).
func jobLine(m *nats.Msg) string {
	var d struct {
		JobID        string  `json:"job_id"`
		SubmissionID string  `json:"submission_id"`
		Phase        string  `json:"phase"`
		Done         int     `json:"done"`
		Total        int     `json:"total"`
		Unit         string  `json:"unit"`
		Reason       string  `json:"reason"`
		GPUHours     float64 `json:"gpu_hours"`
		GPU          string  `json:"gpu"`
	}
	_ = json.Unmarshal(m.Data, &d)
	at := time.Now().Format("15:04:05")
	switch events.Type(m.Header.Get(ce.HeaderType)) {
	case events.RunnerJobStarted:
		return fmt.Sprintf("  %s  runner  %s started for %s on %s", at, d.JobID, d.SubmissionID, d.GPU)
	case events.RunnerJobProgress:
		if d.Unit == events.UnitBytes {
			return fmt.Sprintf("  %s  runner  %s %s", at, d.JobID, progressText(d.Phase, d.Done, d.Total, d.Unit))
		}
		return fmt.Sprintf("  %s  runner  %s %-28s [%d/%d workloads]", at, d.JobID, d.Phase, d.Done, d.Total)
	case events.RunnerJobCompleted:
		return fmt.Sprintf("  %s  runner  %s completed (%.4f GPU-hours)", at, d.JobID, d.GPUHours)
	case events.RunnerJobFailed:
		return fmt.Sprintf("  %s  runner  %s FAILED: %s", at, d.JobID, d.Reason)
	}
	return fmt.Sprintf("  %s  runner  %s", at, m.Subject)
}

func servedLine(stages []string) string {
	out := ""
	for _, s := range events.Stages {
		mark := "not yet built"
		if slices.Contains(stages, s) {
			mark = "yes"
		}
		out += fmt.Sprintf("%s (%s) ", s, mark)
	}
	return out
}
