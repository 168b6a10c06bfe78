package round

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// interval is the ticker's period: a third of the lease's TTL (so a
// lease is renewed at least that often), at most 5 s.
func (s *Service) interval() time.Duration { return min(s.opts.LeaseTTL/3, 5*time.Second) }

// tick runs the ticker: once at start, then every interval, it looks at
// every pod's lease (every running round holds one). A lease this
// instance holds is renewed and its round driven (deadlines, the plan,
// the outbox, the end); an expired one is recovered (see recover); one
// another live instance holds is left to it.
func (s *Service) tick(ctx context.Context) error {
	t := time.NewTicker(s.interval())
	defer t.Stop()
	for {
		if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("round sweep", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sweep is one tick.
func (s *Service) sweep(ctx context.Context) error {
	keys, err := s.rounds.ListKeysFiltered(ctx, "pod.>")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("round: list the pods' leases: %w", err)
	}
	var pods []string
	for k := range keys.Keys() {
		pods = append(pods, strings.TrimPrefix(k, "pod."))
	}
	var errs []error
	for _, pod := range pods {
		if ctx.Err() != nil {
			return nil
		}
		if err := s.sweepPod(ctx, pod); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Service) sweepPod(ctx context.Context, pod string) error {
	value, _, err := s.getLease(ctx, pod)
	if err != nil || value == nil {
		return err
	}
	l, state := readLease(value, time.Now())
	switch {
	case state == leaseHeld && l.Holder == s.id:
		// Renewed once a third of the TTL has passed since the last
		// write: the tick is at most a third of it, so a live holder's
		// lease never has less than a third left.
		if time.Until(l.ExpiresAt) > s.opts.LeaseTTL*2/3 {
			return s.drive(ctx, l.Round)
		}
		if err := s.renew(ctx, pod, l.Round); errors.Is(err, errLeaseLost) {
			s.log.Warn("lease lost to another instance", "pod", pod, "round", l.Round)
			return nil
		} else if err != nil {
			return err
		}
		return s.drive(ctx, l.Round)
	case state == leaseHeld:
		return nil // another live instance drives it
	case l.Round == "":
		return nil // a value nobody can recover; the next round takes it over
	}
	running, err := s.recover(ctx, l.Round)
	if err != nil || running {
		return err
	}
	// Its round has ended: the lease is stale.
	return s.release(ctx, pod, l.Round)
}

// recover takes over a round whose lease has expired (its instance died:
// a SIGKILL of the round service or of `arena up`) and says whether it
// still runs. A running round that can resume is leased to this instance
// and resumed; one that cannot (its campaign is no longer loaded, its
// state is of another stateVersion) ends with round.failed reason
// interrupted and the steps it reached; a state that does not decode is replaced by
// a failed one. A round that has ended has its outbox flushed (its end,
// the pod's release).
func (s *Service) recover(ctx context.Context, id string) (bool, error) {
	r, rev, err := s.load(ctx, id)
	switch {
	case errors.Is(err, errNoRound):
		return false, nil
	case errors.Is(err, errUndecodable):
		return false, s.failUndecodable(ctx, id, rev, err)
	case err != nil:
		return false, err
	}
	if r.Status != StatusRunning {
		return false, s.flush(ctx, id)
	}
	camp, ok := s.campaign(r.Campaign)
	why := ""
	switch {
	case r.Version != stateVersion:
		why = fmt.Sprintf("its state is version %d, and this service resumes version %d", r.Version, stateVersion)
	case !ok || camp.Engine == nil:
		why = fmt.Sprintf("its campaign %s is no longer loaded", r.Campaign)
	}
	if why != "" {
		s.log.Warn("round cannot resume", "round", id, "why", why)
		if _, err := s.update(ctx, id, func(r *Round) bool {
			return fail(r, reason.Interrupted, "the round could not resume: "+why, time.Now().UTC())
		}); err != nil {
			return false, err
		}
		return false, s.flush(ctx, id)
	}
	// Take the lease over first: of the instances that see it expired,
	// one wins the compare-and-set and resumes the round.
	value, lrev, err := s.getLease(ctx, r.Pod)
	if err != nil {
		return false, err
	}
	l, state := readLease(value, time.Now())
	switch {
	case state == leaseHeld:
		return l.Round == id, nil
	case state == leaseExpired && l.Round != "" && l.Round != id:
		// An expired lease of another round: not this round's to take.
		// This round lost its pod and cannot resume.
		if _, err := s.update(ctx, id, func(r *Round) bool {
			return fail(r, reason.Interrupted, "the round could not resume: its pod was leased to round "+l.Round, time.Now().UTC())
		}); err != nil {
			return false, err
		}
		return false, s.flush(ctx, id)
	}
	if err := s.claim(ctx, r.Pod, id, lrev); errors.Is(err, errLeaseLost) {
		return true, nil // another instance took it over
	} else if err != nil {
		return false, err
	}
	s.log.Info("round taken over", "round", id, "pod", r.Pod, "from", l.Holder)
	if _, err := s.update(ctx, id, func(r *Round) bool {
		if r.Status != StatusRunning {
			return false
		}
		resume(r, camp, time.Now().UTC(), s.opts.EntryTimeout)
		return true
	}); err != nil {
		return true, err
	}
	r, _, err = s.load(ctx, id)
	if err != nil {
		return true, err
	}
	s.after(ctx, r)
	return true, nil
}

// failUndecodable ends a round whose state this service cannot read: the
// state is replaced (by compare-and-set) with a failed one, round.failed
// is published, and no pod is known to release (the next round on it
// takes the expired lease over).
func (s *Service) failUndecodable(ctx context.Context, id string, rev uint64, cause error) error {
	failed := events.RoundFailedData{RoundID: id, Reason: string(reason.Interrupted),
		Message: "the round could not resume: its state does not decode (" + cause.Error() + ")"}
	r := Round{Version: stateVersion, ID: id, Status: StatusFailed, Failure: &failed}
	r.emit(Effect{Failed: &failed})
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.rounds.Update(ctx, roundKey(id), body, rev); err != nil && !bus.Conflict(err) {
		return fmt.Errorf("round: replace the state of round %s: %w", id, err)
	}
	return s.flush(ctx, id)
}

// drive moves a round this instance holds: entries past their deadline
// are disqualified (round_job_timeout), the plan advances, the outbox is
// flushed, and a round waiting at its teardown ends.
func (s *Service) drive(ctx context.Context, id string) error {
	r, err := s.update(ctx, id, func(r *Round) bool {
		if r.Status != StatusRunning {
			return false
		}
		now := time.Now().UTC()
		camp, ok := s.campaign(r.Campaign)
		if !ok || camp.Engine == nil {
			return fail(r, reason.Interrupted, fmt.Sprintf("the round cannot go on: its campaign %s is no longer loaded", r.Campaign), now)
		}
		// Every transition emits an effect, so a moved Seq is a change.
		before := r.Seq
		timeouts(r, now, s.opts.EntryTimeout)
		advance(r, camp, now, s.opts.EntryTimeout)
		return r.Seq != before
	})
	if errors.Is(err, errNoRound) {
		return nil
	}
	if err != nil {
		return err
	}
	s.after(ctx, r)
	return nil
}

// settle ends a round waiting at its teardown: it asks the score service
// for the standing of each measured entry's submission and finishes the
// round with them. While the score service does not answer it waits (the
// next tick asks again), up to the round's ScoreBy; after that the
// entries it could not score are disqualified as not scored.
func (s *Service) settle(ctx context.Context, id string) error {
	r, _, err := s.load(ctx, id)
	if err != nil {
		return err
	}
	if !atTeardown(r) {
		return nil
	}
	late := r.ScoreBy != nil && time.Now().After(*r.ScoreBy)
	scores := map[string]devScore{}
	for _, e := range r.Entries {
		if e.Run == nil || e.Submission == "" {
			continue
		}
		if _, ok := scores[e.Submission]; ok {
			continue
		}
		st, err := s.standing(ctx, e.Submission)
		var refused *ctl.Error
		switch {
		case errors.As(err, &refused) && refused.Code == ctl.CodeNotFound:
			scores[e.Submission] = devScore{Missing: "not scored yet: the score service does not know submission " + e.Submission}
		case err != nil && !late:
			return fmt.Errorf("round: the standing of %s: %w", e.Submission, err)
		case err != nil:
			scores[e.Submission] = devScore{Missing: "not scored yet: the score service did not answer: " + err.Error()}
		default:
			scores[e.Submission] = devScoreOf(st)
		}
	}
	if _, err := s.update(ctx, id, func(r *Round) bool {
		return finish(r, scores, s.policy, s.opts.DriftThreshold, time.Now().UTC())
	}); err != nil {
		return err
	}
	return s.flush(ctx, id)
}

// devScoreOf reads a standing's dev score, or why there is none.
func devScoreOf(st ctl.Standing) devScore {
	switch {
	case st.Score != nil:
		return devScore{Score: st.Score}
	case st.Failed != "":
		return devScore{Missing: "not scored: " + st.Failed}
	case len(st.Pending) > 0:
		return devScore{Missing: notScored + " (pending: " + strings.Join(st.Pending, ", ") + ")"}
	}
	return devScore{Missing: notScored}
}

// standingTimeout bounds one question to the score service.
const standingTimeout = 10 * time.Second

// standing asks the score service what it knows of a submission.
func (s *Service) standing(ctx context.Context, id string) (ctl.Standing, error) {
	ctx, cancel := context.WithTimeout(ctx, standingTimeout)
	defer cancel()
	return ctl.Call[ctl.Standing](ctx, s.bus.Conn(), ctl.SubjectStanding, ctl.StandingRequest{SubmissionID: id})
}
