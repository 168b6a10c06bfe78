package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/podlease"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// pod is what the runner knows of its pod and tells the pods registry:
// whether a round's lease holds the pod (read from the lease's key in
// the rounds bucket by a KV watch, decided by podlease.Read as the round
// service decides it), and the job it runs now.
//
// Invariants:
//   - While a round holds the pod the runner takes no shared job
//     (jobs.*.*), only the jobs pinned to its pod: sharedOpen is read
//     before each fetch of the shared durable. A shared job fetched
//     before the lease was seen runs to its end (a job is never
//     preempted); the round's first pinned job waits behind it, at most
//     one job per runner of the pod.
//   - A lease whose holder died lapses at its expires_at without any
//     write to the key: a timer set to it reads the last value again.
//   - The registry entry is written on every change and every third of
//     the bucket's TTL; it lapses a TTL after the runner stops writing.
type pod struct {
	rounds, pods jetstream.KeyValue
	log          *slog.Logger
	key          string
	// beat bounds the period of the entry's writes: a third of the job
	// ack deadline, the consume loop's heartbeat, so that an entry that
	// names a job is never older than that while its runner lives (see
	// Service.heldElsewhere).
	beat time.Duration

	mu    sync.Mutex
	entry events.PodEntry
	// lease is the last value of the pod's lease key (nil: none).
	lease []byte
	// expiry re-reads lease when a held lease would lapse.
	expiry *time.Timer
	// changed wakes the heartbeat to write the entry at once.
	changed chan struct{}
}

func newPod(rounds, pods jetstream.KeyValue, log *slog.Logger, e events.PodEntry, beat time.Duration) *pod {
	return &pod{rounds: rounds, pods: pods, log: log, key: bus.Key(e.Pod, e.Runner), entry: e, beat: beat, changed: make(chan struct{}, 1)}
}

// PodKey is a runner's key in the pods registry: <pod>.<runner>, each
// part a KV token (bus.Key).
func PodKey(pod, runner string) string { return bus.Key(pod, runner) }

// sharedOpen reports whether the runner may take shared jobs: no round
// holds its pod.
func (p *pod) sharedOpen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.entry.HeldBy == ""
}

func (p *pod) notify() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// setLease takes the lease key's new value and decides the pod's state
// at now, arming the expiry timer for a held lease.
func (p *pod) setLease(value []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lease = value
	p.decideLocked()
}

func (p *pod) decideLocked() {
	l, state := podlease.Read(p.lease, time.Now())
	held := ""
	if state == podlease.Held {
		held = l.Round
		if p.expiry != nil {
			p.expiry.Stop()
		}
		p.expiry = time.AfterFunc(time.Until(l.ExpiresAt), func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.decideLocked()
		})
	}
	if held != p.entry.HeldBy {
		p.log.Info("pod lease", "round", held, "state", state.String())
		p.entry.HeldBy = held
		p.notify()
	}
}

// setJob records the job the runner runs now (nil: idle).
func (p *pod) setJob(j *events.PodJob) {
	p.mu.Lock()
	p.entry.Job = j
	p.mu.Unlock()
	p.notify()
}

// watchLease follows the pod's lease key until ctx ends. ready is closed
// once the key's current value has been read, so the runner asks for
// no shared job before it knows whether its pod is held.
func (p *pod) watchLease(ctx context.Context, ready chan<- struct{}) error {
	defer func() {
		p.mu.Lock()
		if p.expiry != nil {
			p.expiry.Stop()
		}
		p.mu.Unlock()
	}()
	key := podlease.Key(p.entry.Pod)
	for first := true; ctx.Err() == nil; {
		w, err := p.rounds.Watch(ctx, key)
		if err != nil {
			if first {
				return fmt.Errorf("runner: watch the lease of pod %s: %w", p.entry.Pod, err)
			}
			p.log.Warn("lease watch", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		for e := range w.Updates() {
			if e == nil { // the current value has been delivered
				if first {
					first = false
					close(ready)
				}
				continue
			}
			switch e.Operation() {
			case jetstream.KeyValuePut:
				p.setLease(e.Value())
			default: // deleted or purged: released
				p.setLease(nil)
			}
		}
		// The watch ends with ctx, or when its consumer was lost (a
		// server restart): watch again, from the current value.
		_ = w.Stop()
	}
	return nil
}

// announce writes the runner's entry every third of the bucket's TTL (or
// every beat, when shorter) and at each change, until ctx ends; then it
// deletes it.
func (p *pod) announce(ctx context.Context) error {
	every := bus.DefaultPodsTTL / 3
	if st, err := p.pods.Status(ctx); err == nil && st.TTL() > 0 {
		every = st.TTL() / 3
	}
	if p.beat > 0 {
		every = min(every, p.beat)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := p.pods.Delete(dctx, p.key); err != nil {
			p.log.Warn("pods registry: entry not deleted; it lapses after the bucket's TTL", "err", err)
		}
	}()
	for {
		p.mu.Lock()
		e := p.entry
		p.mu.Unlock()
		e.SeenAt = time.Now().UTC()
		body, _ := json.Marshal(e)
		if _, err := p.pods.Put(ctx, p.key, body); err != nil && ctx.Err() == nil {
			p.log.Warn("pods registry: entry not written", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-p.changed:
		}
	}
}

// openPod opens the buckets the pod's registry and lease need.
func openPod(ctx context.Context, js jetstream.JetStream) (rounds, pods jetstream.KeyValue, err error) {
	for _, b := range []struct {
		name string
		kv   *jetstream.KeyValue
	}{{bus.BucketRounds, &rounds}, {bus.BucketPods, &pods}} {
		kv, err := js.KeyValue(ctx, b.name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil, fmt.Errorf("runner: bucket %s does not exist: start the arena's services of this version first (they provision it): %w", b.name, err)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("runner: open bucket %s: %w", b.name, err)
		}
		*b.kv = kv
	}
	return rounds, pods, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
