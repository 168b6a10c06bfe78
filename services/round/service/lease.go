package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/events/ctl"
	"github.com/lowbarena/lowbarena/services/domain/record"
)

// Lease is the value of a pod's key (pod.<pod> in the rounds bucket): the
// round that holds the pod, the instance that drives it, and when the
// lease lapses unless that instance renews it.
//
// Known limit: the expiry is written with the holder's clock and read
// with the reader's. An instance whose clock runs ahead of the holder's
// by more than the remaining time takes over a live round early, and one
// that runs behind waits longer for a dead holder. Taking over early is
// safe (every change to a round is a compare-and-set and every event has
// a deterministic id: two drivers do the same work twice, never
// different work), so skew costs time, not correctness; keep the
// instances' clocks in sync (NTP) and the TTL well above their skew.
type Lease struct {
	Round     string    `json:"round"`
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expires_at"`
}

// leaseState is what a pod's key says about the pod.
type leaseState int

const (
	// leaseFree: no key; the pod is taken with Create.
	leaseFree leaseState = iota
	// leaseHeld: a lease that has not expired; the pod is busy.
	leaseHeld
	// leaseExpired: a lease whose holder did not renew it in time (it
	// died), or a value this service did not write (an older arena kept
	// the bare round id there, forever after a crash). It is taken over
	// by compare-and-set on its revision.
	leaseExpired
)

func (s leaseState) String() string {
	return [...]string{"free", "held", "expired"}[s]
}

// readLease decides what a pod's key says at now; value is nil when the
// key does not exist.
func readLease(value []byte, now time.Time) (Lease, leaseState) {
	if value == nil {
		return Lease{}, leaseFree
	}
	var l Lease
	if err := json.Unmarshal(value, &l); err != nil || l.Round == "" {
		// The old format: the bare round id. Treated as expired.
		id := strings.TrimSpace(string(value))
		if !record.ValidID(id) {
			id = ""
		}
		return Lease{Round: id}, leaseExpired
	}
	if now.Before(l.ExpiresAt) {
		return l, leaseHeld
	}
	return l, leaseExpired
}

func podKey(pod string) string { return bus.Key("pod", pod) }

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
