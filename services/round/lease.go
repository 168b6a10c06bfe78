package round

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/podlease"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// Lease is the value of a pod's key (pod.<pod> in the rounds bucket):
// the round that holds the pod, the instance that drives it, and when the
// lease lapses unless that instance renews it. Its type and the rule
// that decides whether it holds (podlease.Read) live in the domain core,
// where the pod's runners read them too: a lease whose holder died lapses
// for both at the same moment.
type Lease = podlease.Lease

// leaseState is what a pod's key says about the pod.
type leaseState = podlease.State

const (
	leaseFree    = podlease.Free
	leaseHeld    = podlease.Held
	leaseExpired = podlease.Expired
)

// readLease decides what a pod's key says at now; value is nil when the
// key does not exist.
func readLease(value []byte, now time.Time) (Lease, leaseState) { return podlease.Read(value, now) }

func podKey(pod string) string { return podlease.Key(pod) }

// errLeaseLost is a lease another instance took over (or released)
// between the read and the write.
var errLeaseLost = errors.New("round: the pod's lease moved")

// getLease reads a pod's key: its value (nil when absent) and revision.
func (s *Service) getLease(ctx context.Context, pod string) ([]byte, uint64, error) {
	e, err := s.rounds.Get(ctx, podKey(pod))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("round: read the lease of pod %s: %w", pod, err)
	}
	return e.Value(), e.Revision(), nil
}

func (s *Service) leaseValue(round string) []byte {
	body, _ := json.Marshal(Lease{Round: round, Holder: s.id, ExpiresAt: time.Now().UTC().Add(s.opts.LeaseTTL)})
	return body
}

// claim writes this instance's lease on pod for round: with Create when
// the key was absent (rev 0), else by compare-and-set over revision rev.
// errLeaseLost when another writer came first.
func (s *Service) claim(ctx context.Context, pod, round string, rev uint64) error {
	var err error
	if rev == 0 {
		_, err = s.rounds.Create(ctx, podKey(pod), s.leaseValue(round))
	} else {
		_, err = s.rounds.Update(ctx, podKey(pod), s.leaseValue(round), rev)
	}
	if bus.Conflict(err) {
		return errLeaseLost
	}
	if err != nil {
		return fmt.Errorf("round: lease pod %s: %w", pod, err)
	}
	return nil
}

// take leases pod for a new round. A held lease refuses (409). An
// expired one whose round still runs is recovered first: resumed (the
// pod stays busy) or ended (which frees it). Any other expired lease, an
// old-format one included, is taken over by compare-and-set.
func (s *Service) take(ctx context.Context, pod, round string) error {
	for attempt := 0; attempt < 8; attempt++ {
		value, rev, err := s.getLease(ctx, pod)
		if err != nil {
			return err
		}
		l, state := readLease(value, time.Now())
		if state == leaseHeld {
			return ctl.Refuse(ctl.CodeConflict, "pod %s is running round %s; wait for it or name another pod", pod, l.Round)
		}
		if state == leaseExpired && l.Round != "" {
			running, err := s.recover(ctx, l.Round)
			if err != nil {
				return err
			}
			if running {
				continue // resumed: the next read finds the lease held
			}
			// The round behind the lease has ended, and recover may
			// have released the lease: write over what is there now.
			if value, rev, err = s.getLease(ctx, pod); err != nil {
				return err
			}
			if _, state := readLease(value, time.Now()); state == leaseHeld {
				continue
			}
		}
		switch err := s.claim(ctx, pod, round, rev); {
		case errors.Is(err, errLeaseLost):
			continue
		case err != nil:
			return err
		}
		return nil
	}
	return ctl.Refuse(ctl.CodeConflict, "pod %s is contended; try again", pod)
}

// renew extends this instance's lease on pod for round by a TTL.
// errLeaseLost when the key no longer holds it.
func (s *Service) renew(ctx context.Context, pod, round string) error {
	value, rev, err := s.getLease(ctx, pod)
	if err != nil {
		return err
	}
	l, state := readLease(value, time.Now())
	if value == nil || l.Round != round || l.Holder != s.id || state == leaseFree {
		return errLeaseLost
	}
	return s.claim(ctx, pod, round, rev)
}

// release deletes pod's lease if it names round, whoever holds it: the
// round has ended. Deleting by revision leaves a lease another round
// took in between alone.
func (s *Service) release(ctx context.Context, pod, round string) error {
	value, rev, err := s.getLease(ctx, pod)
	if err != nil || value == nil {
		return err
	}
	if l, _ := readLease(value, time.Now()); l.Round != round {
		return nil
	}
	if err := s.rounds.Delete(ctx, podKey(pod), jetstream.LastRevision(rev)); err != nil && !bus.Conflict(err) {
		return fmt.Errorf("round: release pod %s: %w", pod, err)
	}
	return nil
}
