package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lowbarena/lowbarena/platform/ctl"
)

// ask sends a query to the score service and returns its rows.
func ask(ctx context.Context, natsURL, subject string, q ctl.Query, timeout time.Duration) ([]ctl.Row, error) {
	c, err := dial(ctx, natsURL)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return askOn(ctx, c, subject, q, timeout)
}

// askOn is ask over the connection c (the demo's follower asks on its
// own arena's connection, whose credentials are in its data folder).
func askOn(ctx context.Context, c *client, subject string, q ctl.Query, timeout time.Duration) ([]ctl.Row, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// In chunks, so that any number of rows answers (one reply is
	// bounded by the server's max_payload).
	rows, err := ctl.CallRowsWaiting(rctx, c.nc, subject, q, serviceWait)
	if errors.Is(err, ctl.ErrNoService) {
		return nil, fmt.Errorf("%w: no score service answers (is `arena up` running with its score stage?)", ErrArenaDown)
	}
	if err != nil {
		return nil, fmt.Errorf("the score service: %w", err)
	}
	return rows, nil
}

func printRows(w io.Writer, rows []ctl.Row, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WHEN\tSUBMISSION\tCAMPAIGN\tPARTICIPANT\tMETHOD\tPOLICY\tSCORE\tE\tDRIFT\tQUALIFIED\tRANKED\tREASON")
	for _, r := range rows {
		method := r.Method
		if len(method) > 40 {
			method = method[:37] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.4f\t%.4f\t%.4f\t%s\t%s\t%s\n", time.UnixMilli(int64(r.TsMs)).UTC().Format("2006-01-02 15:04"),
			r.SubmissionID, r.Campaign, r.Participant, method, r.Policy, r.Score, r.Gain, r.Drift, yes(r.Qualified), yes(r.Ranked), r.Reason)
	}
	return tw.Flush()
}

func yes(b uint8) string {
	if b == 1 {
		return "yes"
	}
	return "no"
}

// cmdLeaderboard prints the scores of a policy, best first.
func cmdLeaderboard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("leaderboard", stderr)
	natsURL := natsFlag(fs)
	camp := fs.String("campaign", "", "only this campaign (task id)")
	pol := fs.String("policy", "", "scoring policy (default the service's)")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	rows, err := ask(ctx, *natsURL, ctl.SubjectLeaderboard, ctl.Query{Campaign: *camp, Policy: *pol}, 30*time.Second)
	if err != nil {
		return err
	}
	return printRows(stdout, rows, *asJSON)
}

// cmdHistory prints scores over time.
func cmdHistory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("history", stderr)
	natsURL := natsFlag(fs)
	camp := fs.String("campaign", "", "only this campaign (task id)")
	participant := fs.String("participant", "", "only this participant")
	model := fs.String("model", "", "only this method")
	asJSON := fs.Bool("json", false, "print JSON")
	rounds := fs.Bool("rounds", false, "the rounds and their results instead of the scores")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if *rounds {
		return roundHistory(ctx, *natsURL, *camp, *asJSON, stdout)
	}
	rows, err := ask(ctx, *natsURL, ctl.SubjectHistory, ctl.Query{Campaign: *camp, Participant: *participant, Model: *model}, 30*time.Second)
	if err != nil {
		return err
	}
	return printRows(stdout, rows, *asJSON)
}

// cmdRescore recomputes scores from stored stage outcomes under a policy.
func cmdRescore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("rescore", stderr)
	natsURL := natsFlag(fs)
	pol := fs.String("policy", "", "scoring policy version to score under, e.g. lowb-score/v1 (required)")
	since := fs.String("since", "", "only submissions whose outcomes finished at or after this time (RFC 3339)")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if *pol == "" {
		return usageErr("rescore needs --policy (for example lowb-score/v1)")
	}
	q := ctl.Query{Policy: *pol}
	if *since != "" {
		t, err := time.Parse(time.RFC3339, *since)
		if err != nil {
			return usageErr("--since %q: want RFC 3339, e.g. 2026-12-01T00:00:00Z", *since)
		}
		q.Since = t
	}
	fmt.Fprintf(stderr, "rescoring under %s from stored outcomes (no GPU work)...\n", *pol)
	rows, err := ask(ctx, *natsURL, ctl.SubjectRescore, q, 5*time.Minute)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d submissions scored under %s\n", len(rows), *pol)
	return printRows(stdout, rows, *asJSON)
}

// roundHistory prints the rounds and their results.
func roundHistory(ctx context.Context, natsURL, campaign string, asJSON bool, w io.Writer) error {
	c, err := dial(ctx, natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	rep, err := ctl.CallWaiting[ctl.ListReply](ctx, c.nc, ctl.SubjectRoundList, ctl.ListRequest{Campaign: campaign}, serviceWait)
	if errors.Is(err, ctl.ErrNoService) {
		return fmt.Errorf("%w: no round service answers (is `arena up` running?)", ErrArenaDown)
	}
	if err != nil {
		return fmt.Errorf("round history: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep.Rounds)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STARTED\tROUND\tCAMPAIGN\tPOD\tSTATUS\tSTEPS\tSCORED\tDISQUALIFIED\tTOP\tLEADER\tCHANGED\tDRIFT")
	for _, r := range rep.Rounds {
		scored, disq, top, leader, changed, drift := 0, 0, "-", "-", "-", "-"
		if res := r.Result; res != nil {
			for _, e := range res.Entries {
				if e.Status == "scored" {
					scored++
				} else {
					disq++
				}
			}
			if res.TopScore != nil {
				top = fmt.Sprintf("%.4f", *res.TopScore)
			}
			leader, changed = res.Leader, fmt.Sprint(res.LeaderChanged)
			if res.Drift != nil {
				drift = fmt.Sprintf("%.2f%%", 100**res.Drift)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", r.StartedAt.Format("2006-01-02 15:04"), r.RoundID, r.Campaign, r.Pod,
			r.Status, r.Steps, scored, disq, top, leader, changed, drift)
	}
	return tw.Flush()
}
