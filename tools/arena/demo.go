//go:build embedded

package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// cmdDemo is what `make run` does: start the arena, submit the bundled
// examples, print each one's stages and record as they end (the
// follower), run a round on those that kept their contracts, print the
// leaderboard, and keep serving (unless --exit) so that `arena watch` and
// `arena show` can be used from another terminal.
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
	logOut, logWhere, closeLog, err := logDestination(o.data, o.logFormat, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	a, err := startArena(runCtx, o, logOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "arena up: NATS %s · HTTP http://%s · logs %s\n", a.natsURL, a.httpAddr, logWhere)
	f := newFollower(a.natsURL, a.stages, stdout)
	f.connect = a.dial
	go func() {
		if err := f.run(runCtx); err != nil {
			a.log.Warn("the terminal's follower stopped", "err", err)
		}
	}()
	rid, err := demo(runCtx, a, f, bundles, *timeout, stdout, stderr)
	if err != nil || *exit {
		stop()
		if werr := a.wait(); err == nil {
			err = werr
		}
		return err
	}
	fmt.Fprintf(stdout, "\narena up: NATS %s · HTTP http://%s · data %s\n", a.natsURL, a.httpAddr, a.data)
	if tok, err := a.demoOperatorToken(ctx); err == nil {
		// The examples are dev submissions: the public page shows rounds
		// only. The token rides in the fragment, which the browser never
		// sends; the page keeps it in the tab's session storage.
		fmt.Fprintf(stdout, "live page with every submission, as this demo's operator: http://%s/#token=%s\n", a.httpAddr, tok)
		if rid != "" {
			fmt.Fprintf(stdout, "the round's page: http://%s/rounds/%s#token=%s\n", a.httpAddr, rid, tok)
		}
		fmt.Fprintf(stdout, "the leaderboard: http://%s/leaderboard#token=%s\n", a.httpAddr, tok)
	}
	fmt.Fprintf(stdout, "in another terminal: arena watch --all · arena show ID --json · arena sql \"SHOW TABLES\" (Ctrl-C stops)\n")
	return a.wait()
}

// demo submits the bundles, waits for their records, and runs a round on
// those that kept their contracts; it returns the round's id ("" when
// there was none).
func demo(ctx context.Context, a *arenaProc, f *follower, bundles []string, timeout time.Duration, stdout, stderr io.Writer) (string, error) {
	select {
	case <-f.ready:
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("demo: the terminal's follower did not start (see %s)", LogFile)
	}
	c, err := a.dial(ctx)
	if err != nil {
		return "", err
	}
	defer c.close()
	fmt.Fprintf(stdout, "stages served by this arena: %s\n", servedLine(a.stages))
	ids := make([]string, len(bundles))
	for i, dir := range bundles {
		if ids[i], err = submitDir(ctx, c, dir, stderr); err != nil {
			return "", fmt.Errorf("submit %s: %w", dir, err)
		}
		f.t.Printf("submitted %s as %s", dir, ids[i])
	}
	recs := make([]*record.Submission, len(ids))
	for i, id := range ids {
		rec, err := waitFor(ctx, c, id, timeout, func(r *record.Submission) bool { return settled(r, a.stages) }, io.Discard)
		if err != nil {
			return "", err
		}
		recs[i] = rec
		f.record(rec) // printed here unless the follower already did
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
	if len(entrants) == 0 || !slices.Contains(a.stages, "score") {
		f.leaderboard(ctx, "")
		return "", nil
	}
	rid, err := startRoundOn(ctx, c, ctl.StartRequest{Campaign: camp, Candidates: entrants})
	if err != nil {
		return "", err
	}
	f.t.Printf("\nround %s on %d candidates:", rid, len(entrants))
	// The follower prints the steps, the result and the leaderboard.
	deadline := time.After(timeout)
	for {
		select {
		case ended := <-f.roundEnded:
			if ended == rid {
				return rid, nil
			}
		case <-deadline:
			return rid, fmt.Errorf("round %s did not end within %s (arena watch --round %s follows it)", rid, timeout, rid)
		case <-ctx.Done():
			return rid, ctx.Err()
		}
	}
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
