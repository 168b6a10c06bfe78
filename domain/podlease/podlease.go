// Package podlease is what a pod's lease says: the value the round
// service keeps under pod.<pod> in the rounds bucket while a round runs
// on the pod, and the one rule that decides whether that lease still
// holds. The round service takes, renews and releases leases; the
// pod's runners read them to keep shared work off a held pod. Both
// decide with Read, so a lease whose holder died lapses for both at the
// same moment.
package podlease

import (
	"encoding/json"
	"time"
)

// Lease is the value of a pod's key: the round that holds the pod, the
// instance that drives it, and when the lease lapses unless that
// instance renews it.
//
// Known limit: the expiry is written with the holder's clock and read
// with the reader's. A reader whose clock runs ahead of the holder's by
// more than the remaining time sees a live lease lapse early, and one
// that runs behind waits longer for a dead holder. For the round service
// that costs time, not correctness (every change to a round is a
// compare-and-set); for a runner it means shared work may land on a held
// pod early by the skew. Keep clocks in sync (NTP) and the TTL well
// above their skew.
type Lease struct {
	Round     string    `json:"round"`
	Holder    string    `json:"holder"`
	ExpiresAt time.Time `json:"expires_at"`
}

// State is what a pod's key says about the pod.
type State int

const (
	// Free: no key; the pod is taken with Create.
	Free State = iota
	// Held: a lease that has not expired; the pod is busy.
	Held
	// Expired: a lease whose holder did not renew it in time (it died),
	// or a value that is not a lease (no round, or not JSON). The round
	// service takes it over by compare-and-set on its revision; runners
	// treat the pod as free.
	Expired
)

// String names the state: free, held or expired.
func (s State) String() string {
	switch s {
	case Free:
		return "free"
	case Held:
		return "held"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// Read decides what a pod's key says at now; value is nil when the key
// does not exist (or was deleted).
func Read(value []byte, now time.Time) (Lease, State) {
	if value == nil {
		return Lease{}, Free
	}
	var l Lease
	if err := json.Unmarshal(value, &l); err != nil || l.Round == "" {
		return Lease{}, Expired
	}
	if now.Before(l.ExpiresAt) {
		return l, Held
	}
	return l, Expired
}

// Key is a pod's key in the rounds bucket: pod.<pod>. A pod is a subject
// token (letters, digits, - and _; events.ValidPod), so the key has two
// tokens and a watch on it sees that pod's lease only.
func Key(pod string) string { return "pod." + pod }
