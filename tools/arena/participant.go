package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lowbarena/lowbarena/domain/bundle"
	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// cmdParticipant is `arena participant add|token|list|revoke`, and with
// kind operator `arena operator ...`: the operator's CLI asks the
// gateway, which alone writes the participants bucket, over NATS.
func cmdParticipant(ctx context.Context, kind participant.Kind, args []string, stdout, stderr io.Writer) error {
	verb := ""
	if len(args) > 0 {
		verb, args = args[0], args[1:]
	}
	fs := newFlagSet(string(kind)+" "+verb, stderr)
	natsURL := natsFlag(fs)
	var lim participant.Limits
	var tokenID string
	switch verb {
	case "add":
		if kind == participant.KindParticipant {
			fs.IntVar(&lim.SubmissionsPerDay, "submissions-per-day", 0, "its submissions in any 24 hours (default: the gateway's)")
			fs.Int64Var(&lim.BytesPerSubmission, "bytes-per-submission", 0, "its largest upload in bytes (default: the gateway's)")
			fs.Float64Var(&lim.GPUHoursPerWeek, "gpu-hours-per-week", 0, "the GPU-hours its submissions may use in any 7 days (default: the gateway's)")
		}
	case "revoke":
		fs.StringVar(&tokenID, "token", "", "revoke only the token with this id (default: every token of NAME)")
	case "token", "list":
	default:
		return usageErr("arena %s takes add NAME, token NAME, list or revoke NAME", kind)
	}
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	want := 1
	if verb == "list" {
		want = 0
	}
	if len(pos) != want {
		if want == 0 {
			return usageErr("arena %s list takes no name", kind)
		}
		return usageErr("arena %s %s takes one name", kind, verb)
	}
	c, err := dial(ctx, *natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	call := func(subject string, req any, rep any) error {
		var err error
		switch r := rep.(type) {
		case *ctl.NewToken:
			*r, err = ctl.CallWaiting[ctl.NewToken](rctx, c.nc, subject, req, serviceWait)
		case *ctl.Participants:
			*r, err = ctl.CallWaiting[ctl.Participants](rctx, c.nc, subject, req, serviceWait)
		case *ctl.Revoked:
			*r, err = ctl.CallWaiting[ctl.Revoked](rctx, c.nc, subject, req, serviceWait)
		}
		if errors.Is(err, ctl.ErrNoService) {
			return fmt.Errorf("%w: no gateway answers (is `arena up` running?)", ErrArenaDown)
		}
		var ce *ctl.Error
		if errors.As(err, &ce) {
			return &exitError{code: exitFailed, err: fmt.Errorf("%s %s refused: %s", kind, verb, ce.Message)}
		}
		return err
	}
	switch verb {
	case "add", "token":
		var rep ctl.NewToken
		subject, req := ctl.SubjectParticipantToken, any(ctl.IssueToken{Name: pos[0]})
		if verb == "add" {
			subject, req = ctl.SubjectParticipantAdd, ctl.AddParticipant{Name: pos[0], Kind: kind, Limits: lim}
		}
		if err := call(subject, req, &rep); err != nil {
			return err
		}
		what := "added"
		if verb == "token" {
			what = "has a new token"
		}
		fmt.Fprintf(stdout, "%s %s %s (token id %s). Its API token, shown this once (keep it secret; `arena %s revoke %s --token %s` revokes it):\n%s\n",
			rep.Kind, rep.Name, what, rep.TokenID, kind, rep.Name, rep.TokenID, rep.Token)
	case "list":
		var rep ctl.Participants
		if err := call(ctl.SubjectParticipantList, ctl.ListParticipants{}, &rep); err != nil {
			return err
		}
		printParticipants(stdout, rep.Participants)
	case "revoke":
		var rep ctl.Revoked
		if err := call(ctl.SubjectParticipantRevoke, ctl.RevokeTokens{Name: pos[0], TokenID: tokenID}, &rep); err != nil {
			return err
		}
		if len(rep.Revoked) == 0 {
			fmt.Fprintf(stdout, "%s has no token left to revoke\n", pos[0])
			return nil
		}
		fmt.Fprintf(stdout, "revoked %d token(s) of %s: %s\n", len(rep.Revoked), pos[0], strings.Join(rep.Revoked, ", "))
	}
	return nil
}

func printParticipants(w io.Writer, ps []ctl.ParticipantInfo) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tCREATED\tTOKENS\tSUBMISSIONS/DAY\tGPU-HOURS/WEEK\tUPLOAD\tNOW")
	for _, p := range ps {
		var tokens []string
		for _, t := range p.Tokens {
			s := t.ID
			if t.RevokedAt != nil {
				s += " (revoked)"
			}
			tokens = append(tokens, s)
		}
		subs, gpu, upload, now := "-", "-", "-", ""
		if p.Limits != nil && p.Usage != nil {
			subs = fmt.Sprintf("%d of %d", p.Usage.SubmissionsLastDay, p.Limits.SubmissionsPerDay)
			gpu = fmt.Sprintf("%.3g of %.3g", p.Usage.GPUHoursLastWeek, p.Limits.GPUHoursPerWeek)
			upload = bundle.HumanSize(p.Limits.BytesPerSubmission)
			now = "may submit"
			if p.Usage.Refused != "" {
				now = p.Usage.Refused
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Kind, p.CreatedAt.Format("2006-01-02 15:04"), strings.Join(tokens, ", "), subs, gpu, upload, now)
	}
	_ = tw.Flush()
}

// demoOperator is the operator `arena demo` reads its live page as.
const demoOperator = "demo-operator"

// demoOperatorToken returns a fresh token of the demo's operator, adding
// it on the first demo of a data folder: the examples are dev
// submissions, which the live page shows to an operator (or their
// participant) only.
func demoOperatorToken(ctx context.Context, c *client) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := ctl.CallWaiting[ctl.NewToken](rctx, c.nc, ctl.SubjectParticipantAdd, ctl.AddParticipant{Name: demoOperator, Kind: participant.KindOperator}, serviceWait)
	var ce *ctl.Error
	if errors.As(err, &ce) && ce.Code == ctl.CodeConflict {
		rep, err = ctl.CallWaiting[ctl.NewToken](rctx, c.nc, ctl.SubjectParticipantToken, ctl.IssueToken{Name: demoOperator}, serviceWait)
	}
	if err != nil {
		return "", err
	}
	return rep.Token, nil
}
