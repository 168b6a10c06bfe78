package round

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/lowbarena/lowbarena/platform/ctl"
)

// Request time limits: a start stores the campaign's BF16 reference (the
// CLI waits a minute); a list reads the bucket.
const (
	startTimeout = 55 * time.Second
	listTimeout  = 15 * time.Second
)

// serve runs the micro service ctl.ServiceRound (start and list, in its
// queue group, visible to $SRV.PING/INFO/STATS) until ctx ends.
func (s *Service) serve(ctx context.Context) error {
	svc, err := micro.AddService(s.bus.Conn(), micro.Config{Name: ctl.ServiceRound, Version: "1.0.0",
		Description: "the arena's rounds: start one on a pod, list them"})
	if err != nil {
		return fmt.Errorf("round: micro service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	if err := ctl.Endpoint(ctx, svc, "start", ctl.SubjectRoundStart, startTimeout, func(ctx context.Context, req ctl.StartRequest) (ctl.StartReply, error) {
		r, err := s.Start(ctx, req)
		if err != nil {
			return ctl.StartReply{}, err
		}
		return ctl.StartReply{RoundID: r.ID, Steps: len(r.Steps)}, nil
	}); err != nil {
		return err
	}
	if err := ctl.Endpoint(ctx, svc, "list", ctl.SubjectRoundList, listTimeout, func(ctx context.Context, req ctl.ListRequest) (ctl.ListReply, error) {
		rounds, err := s.List(ctx, req.Campaign)
		return ctl.ListReply{Rounds: rounds}, err
	}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// List returns the rounds kept in the rounds bucket, oldest first; a
// failed round says how far it got (Reached) and why (Reason).
func (s *Service) List(ctx context.Context, campaignID string) ([]ctl.Summary, error) {
	out := []ctl.Summary{}
	keys, err := s.rounds.ListKeysFiltered(ctx, "round.>")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("round: list rounds: %w", err)
	}
	for k := range keys.Keys() {
		e, err := s.rounds.Get(ctx, k)
		if err != nil {
			continue
		}
		var r Round
		if json.Unmarshal(e.Value(), &r) != nil || (campaignID != "" && r.Campaign != campaignID) {
			continue
		}
		sum := ctl.Summary{RoundID: r.ID, Campaign: r.Campaign, Pod: r.Pod, Status: r.Status, StartedAt: r.StartedAt, Steps: len(r.Steps), Result: r.Result}
		if r.Status == StatusFailed {
			if st := r.reached(); st != nil {
				sum.Reached = st.Step
			}
			if r.Failure != nil {
				sum.Reason = r.Failure.Reason
			}
		}
		out = append(out, sum)
	}
	slices.SortFunc(out, func(a, b ctl.Summary) int { return a.StartedAt.Compare(b.StartedAt) })
	return out, nil
}
