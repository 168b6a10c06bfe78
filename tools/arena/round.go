package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lowbarena/lowbarena/platform/ctl"
)

// cmdRound is `arena round start --campaign C --candidates ID...`.
func cmdRound(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "start" {
		return usageErr("arena round start --campaign C --candidates ID[,ID...] [--pod P] [--wait]")
	}
	fs := newFlagSet("round start", stderr)
	natsURL := natsFlag(fs)
	camp := fs.String("campaign", "", "the campaign (task id) of the round (required)")
	pod := fs.String("pod", "", "the pod to run on, one a live runner serves (see arena pods); default: the only such pod, refused when there are several")
	wait := fs.Bool("wait", false, "follow the round step by step until it ends")
	candidates := fs.String("candidates", "", "candidate submission ids, comma-separated (more may follow as arguments)")
	pos, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	cands := splitIDs(append([]string{*candidates}, pos...))
	if *camp == "" || len(cands) == 0 {
		return usageErr("round start needs --campaign and at least one candidate id")
	}
	id, err := startRound(ctx, *natsURL, ctl.StartRequest{Campaign: *camp, Candidates: cands, Pod: *pod})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "round started; follow it with: arena watch --round %s\n", id)
	if *wait {
		if err := cmdWatch(ctx, []string{"--round", id, "--nats", *natsURL}, stdout, stderr); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, id)
	return nil
}

// startRound asks the round service of the arena at natsURL to start a
// round, connecting as the environment's credentials say (see dial).
func startRound(ctx context.Context, natsURL string, req ctl.StartRequest) (string, error) {
	c, err := dial(ctx, natsURL)
	if err != nil {
		return "", err
	}
	defer c.close()
	return startRoundOn(ctx, c, req)
}

// startRoundOn asks the round service, over c, to start a round (see
// startRound): the demo asks on its own arena's connection, whose
// credentials are in its data folder, wherever that is.
func startRoundOn(ctx context.Context, c *client, req ctl.StartRequest) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rep, err := ctl.CallWaiting[ctl.StartReply](rctx, c.nc, ctl.SubjectRoundStart, req, serviceWait)
	if errors.Is(err, ctl.ErrNoService) {
		return "", fmt.Errorf("%w: no round service answers (is `arena up` running?)", ErrArenaDown)
	}
	var refused *ctl.Error
	if errors.As(err, &refused) {
		return "", errors.New("round refused: " + refused.Message)
	}
	if err != nil {
		return "", fmt.Errorf("round start: %w", err)
	}
	return rep.RoundID, nil
}

// splitIDs takes ids as arguments, comma-separated or not.
func splitIDs(args []string) []string {
	var out []string
	for _, a := range args {
		for _, p := range splitComma(a) {
			if p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
