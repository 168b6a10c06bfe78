package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/services/gateway/participants"
	"github.com/lowbarena/lowbarena/services/gateway/usage"
)

// controls answers the operator's CLI about participants (ctl's
// SubjectParticipant*): the gateway owns the participants bucket, so it
// is the one that writes it. Who may send these requests is NATS's to
// decide: the operator's user only.
type controls struct {
	reg       *participants.Registry
	ledger    *usage.Ledger
	defaults  participant.Limits
	maxUpload int64
	now       func() time.Time
	log       *slog.Logger
}

// ctlTimeout bounds one request; an add hashes one secret.
const ctlTimeout = 30 * time.Second

// serve runs the micro service until ctx ends.
func (c *controls) serve(ctx context.Context, nc *nats.Conn) error {
	svc, err := micro.AddService(nc, micro.Config{Name: ctl.ServiceGateway, Version: "1.0.0",
		Description: "the arena's participants and operators, and their API tokens"})
	if err != nil {
		return fmt.Errorf("gateway: micro service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	err = errors.Join(
		ctl.Endpoint(ctx, svc, "participant-add", ctl.SubjectParticipantAdd, ctlTimeout, c.add),
		ctl.Endpoint(ctx, svc, "participant-token", ctl.SubjectParticipantToken, ctlTimeout, c.token),
		ctl.Endpoint(ctx, svc, "participant-list", ctl.SubjectParticipantList, ctlTimeout, c.list),
		ctl.Endpoint(ctx, svc, "participant-revoke", ctl.SubjectParticipantRevoke, ctlTimeout, c.revoke),
	)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	<-ctx.Done()
	return nil
}

// refusal maps the registry's errors to ctl refusals; the sentence never
// holds a token.
func refusal(err error) error {
	switch {
	case errors.Is(err, participants.ErrExists):
		return ctl.Refuse(ctl.CodeConflict, "%s", trim(err))
	case errors.Is(err, participants.ErrNotFound):
		return ctl.Refuse(ctl.CodeNotFound, "%s", trim(err))
	case errors.Is(err, participants.ErrBadRequest):
		return ctl.Refuse(ctl.CodeBadRequest, "%s", trim(err))
	}
	return err
}

// trim drops the package prefix of the registry's sentinel errors.
func trim(err error) string {
	s := err.Error()
	for _, p := range []string{"participants: the name is taken: ", "participants: no such participant or operator: ", "participants: bad request: "} {
		if len(s) > len(p) && s[:len(p)] == p {
			return s[len(p):]
		}
	}
	return s
}

func (c *controls) add(ctx context.Context, req ctl.AddParticipant) (ctl.NewToken, error) {
	if req.Kind == "" {
		req.Kind = participant.KindParticipant
	}
	tok, t, err := c.reg.Add(ctx, req.Name, req.Kind, req.Limits)
	if err != nil {
		return ctl.NewToken{}, refusal(err)
	}
	c.log.Info("added", "kind", t.Kind, "name", t.Name, "token_id", t.ID)
	return ctl.NewToken{Name: t.Name, Kind: t.Kind, TokenID: t.ID, Token: tok}, nil
}

func (c *controls) token(ctx context.Context, req ctl.IssueToken) (ctl.NewToken, error) {
	tok, t, err := c.reg.Issue(ctx, req.Name)
	if err != nil {
		return ctl.NewToken{}, refusal(err)
	}
	c.log.Info("token issued", "kind", t.Kind, "name", t.Name, "token_id", t.ID)
	return ctl.NewToken{Name: t.Name, Kind: t.Kind, TokenID: t.ID, Token: tok}, nil
}

func (c *controls) list(ctx context.Context, _ ctl.ListParticipants) (ctl.Participants, error) {
	entries, err := c.reg.List(ctx)
	if err != nil {
		return ctl.Participants{}, err
	}
	now := time.Now()
	if c.now != nil {
		now = c.now()
	}
	out := ctl.Participants{Participants: []ctl.ParticipantInfo{}}
	for _, e := range entries {
		info := ctl.ParticipantInfo{Name: e.Name, Kind: e.Kind, CreatedAt: e.CreatedAt, Tokens: []ctl.TokenInfo{}}
		for _, t := range e.Tokens {
			info.Tokens = append(info.Tokens, ctl.TokenInfo{ID: t.ID, CreatedAt: t.CreatedAt, RevokedAt: t.RevokedAt})
		}
		if e.Kind == participant.KindParticipant {
			lim := e.Limits.Or(c.defaults)
			lim.BytesPerSubmission = min(lim.BytesPerSubmission, c.maxUpload)
			info.Limits = &lim
			u, err := c.ledger.Get(ctx, e.Name)
			if err != nil {
				return ctl.Participants{}, err
			}
			use := &ctl.UsageInfo{SubmissionsLastDay: u.SubmissionsAt(now), GPUHoursLastWeek: u.GPUHoursAt(now)}
			if q := u.Check(e.Name, lim, now); q != nil {
				use.Refused = string(q.Code) + ": " + q.Message
			}
			info.Usage = use
		}
		out.Participants = append(out.Participants, info)
	}
	return out, nil
}

func (c *controls) revoke(ctx context.Context, req ctl.RevokeTokens) (ctl.Revoked, error) {
	ids, err := c.reg.Revoke(ctx, req.Name, req.TokenID)
	if err != nil {
		return ctl.Revoked{}, refusal(err)
	}
	if ids == nil {
		ids = []string{}
	}
	c.log.Info("tokens revoked", "name", req.Name, "token_ids", ids)
	return ctl.Revoked{Revoked: ids}, nil
}
