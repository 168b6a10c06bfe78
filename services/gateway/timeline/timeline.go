// Package timeline keeps the submission records in the order the list
// answers them, newest first, so that a page of the list costs the page
// and not the bucket: GET /v1/submissions?limit=50 reads 50 records of
// 100,000, not 100,000 (BenchmarkListSubmissionsScale).
//
// An Index follows the records bucket with one watcher and holds, for
// each record, only what chooses and orders a page (its id, created_at,
// participant and split: about 100 bytes); the records themselves stay in
// the bucket. It is rebuilt from the bucket whenever it starts (the
// watcher replays every key's latest value), so it needs no storage of
// its own and survives nothing it could get wrong.
package timeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/btree"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/participant"
)

// Head is what orders and chooses a record in the list.
type Head struct {
	ID          string    `json:"id"`
	CreatedAt   time.Time `json:"created_at"`
	Participant string    `json:"participant"`
	Split       string    `json:"split"`
}

// Newer reports whether h comes before o in the list: the newer
// created_at first, and among equal times the smaller id first (a total
// order, so that every reader of the same records lists them alike).
func (h Head) Newer(o Head) bool {
	if c := h.CreatedAt.Compare(o.CreatedAt); c != 0 {
		return c > 0
	}
	return h.ID < o.ID
}

// Filter chooses the records of a list: those Viewer may read
// (participant.Viewer.CanRead) and, when Participant is set, that
// participant's only.
type Filter struct {
	Viewer      participant.Viewer
	Participant string
}

// Match reports whether the filter keeps h.
func (f Filter) Match(h Head) bool {
	return f.Viewer.CanRead(h.Participant, h.Split) && (f.Participant == "" || h.Participant == f.Participant)
}

// ErrNotReady says the index has not yet read the bucket through: its
// answer would leave records out. The caller reads the bucket itself.
var ErrNotReady = errors.New("timeline: the index has not read the records bucket through yet")

// Index is the records in list order. Run fills it; Page reads it. Its
// methods are safe for concurrent use.
type Index struct {
	kv jetstream.KeyValue

	mu   sync.RWMutex
	byID map[string]Head
	// trees holds one ordered set per stream a filter reads from: "" every
	// record, "s/"+split, "p/"+participant, "ps/"+participant+"/"+split.
	// Each record is in exactly four, so a write costs four O(log n)
	// updates and a page O(limit + log n) whatever the filter.
	trees map[string]*btree.BTreeG[Head]
	// applied is the bucket stream's sequence the index has read to: every
	// write at or below it is in the index.
	applied uint64
	ready   bool
	// changed is closed and replaced whenever applied moves.
	changed chan struct{}
}

// New returns an empty index of the records in kv; Run fills it.
func New(kv jetstream.KeyValue) *Index {
	return &Index{kv: kv, byID: map[string]Head{}, trees: map[string]*btree.BTreeG[Head]{}, changed: make(chan struct{})}
}

// Run follows the bucket until ctx ends: first every key's latest value,
// then every write and delete as it happens. The index is ready (Page
// answers) once the first pass is through.
//
// Invariant: applied only moves forward, and only past sequences whose
// writes are in the index. The first pass covers every write up to the
// stream's last sequence read before the watcher started (the watcher
// delivers each key's latest value at or after it), so when the pass
// ends applied is at least that sequence, even if the writes at its end
// were deleted or purged since and never come.
func (x *Index) Run(ctx context.Context) error {
	// The bucket may not answer for a moment (a cluster electing its
	// stream's leader): ask again rather than stop the gateway.
	floor, err := x.lastSeq(ctx)
	for delay := 100 * time.Millisecond; err != nil; delay = min(2*delay, 5*time.Second) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		floor, err = x.lastSeq(ctx)
	}
	w, err := x.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("timeline: watch the records: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("timeline: the records watcher stopped")
			}
			if e == nil {
				x.advance(floor, true)
				continue
			}
			x.apply(e)
		}
	}
}

// lastSeq is the last sequence of the bucket's stream.
func (x *Index) lastSeq(ctx context.Context) (uint64, error) {
	st, err := x.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("timeline: the records bucket's status: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("timeline: the records bucket's status is a %T, without a stream", st)
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// apply puts one watched entry in the index: a put replaces the key's
// head (a value that does not decode leaves the key out, as the list
// leaves it out), a delete or purge removes it.
func (x *Index) apply(e jetstream.KeyValueEntry) {
	var h Head
	keep := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &h) == nil
	h.ID = e.Key()
	x.mu.Lock()
	x.remove(h.ID)
	if keep {
		x.put(h)
	}
	x.mu.Unlock()
	x.advance(e.Revision(), false)
}

// remove takes id out of every tree; x.mu is held.
func (x *Index) remove(id string) {
	old, ok := x.byID[id]
	if !ok {
		return
	}
	for _, k := range keys(old) {
		if t := x.trees[k]; t != nil {
			t.Delete(old)
			if t.Len() == 0 {
				delete(x.trees, k)
			}
		}
	}
	delete(x.byID, id)
}

// put puts h in its trees (x.mu is held, h.ID is in none).
func (x *Index) put(h Head) {
	x.byID[h.ID] = h
	for _, k := range keys(h) {
		t := x.trees[k]
		if t == nil {
			t = btree.NewG(32, Head.Newer)
			x.trees[k] = t
		}
		t.ReplaceOrInsert(h)
	}
}

// advance moves applied to seq (never back) and wakes the waiters.
func (x *Index) advance(seq uint64, ready bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if seq <= x.applied && (!ready || x.ready) {
		return
	}
	x.applied = max(x.applied, seq)
	x.ready = x.ready || ready
	close(x.changed)
	x.changed = make(chan struct{})
}

// keys are the trees a head is in.
func keys(h Head) [4]string {
	return [4]string{"", "s/" + h.Split, "p/" + h.Participant, "ps/" + h.Participant + "/" + h.Split}
}

// Len is the number of records indexed.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byID)
}

// Sync waits until the index holds every write the bucket had when Sync
// was called, so that a list answered after a write includes it. It
// gives up after wait (returning nil: the page is then at most that
// stale) and answers ErrNotReady while the first pass is not through.
func (x *Index) Sync(ctx context.Context, wait time.Duration) error {
	seq, err := x.lastSeq(ctx)
	if err != nil {
		return err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		x.mu.RLock()
		ready, applied, changed := x.ready, x.applied, x.changed
		x.mu.RUnlock()
		if ready && applied >= seq {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			if !ready {
				return ErrNotReady
			}
			return nil
		}
	}
}

// Walk calls fn with the heads f keeps, newest first, until fn returns
// false. It holds the index's read lock meanwhile: fn must not block.
// It costs O(log n) to start and O(1) a head (amortised) when every
// head of the trees it reads is kept, which is so for every filter Walk
// builds: the trees are chosen so that only the heads f keeps are in
// them (Match is checked anyway). It answers ErrNotReady before the
// first pass is through.
func (x *Index) Walk(f Filter, fn func(Head) bool) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.ready {
		return ErrNotReady
	}
	var from []*btree.BTreeG[Head]
	for _, k := range f.sources() {
		if t := x.trees[k]; t != nil {
			from = append(from, t)
		}
	}
	merge(from, func(h Head) bool {
		if !f.Match(h) {
			return true
		}
		return fn(h)
	})
	return nil
}

// sources are the trees whose union is exactly the heads f keeps.
func (f Filter) sources() []string {
	v, who := f.Viewer, f.Participant
	switch {
	case v.Kind == participant.KindOperator && who == "":
		return []string{""}
	case v.Kind == participant.KindOperator:
		return []string{"p/" + who}
	case v.Kind == participant.KindParticipant && v.Name != "" && who == v.Name:
		return []string{"p/" + who}
	case who != "":
		return []string{"ps/" + who + "/" + participant.SplitRanked}
	case v.Kind == participant.KindParticipant && v.Name != "":
		return []string{"s/" + participant.SplitRanked, "p/" + v.Name}
	}
	return []string{"s/" + participant.SplitRanked}
}

// Page is the ids of the first limit records f keeps, newest first.
func (x *Index) Page(f Filter, limit int) ([]string, error) {
	ids := make([]string, 0, limit)
	err := x.Walk(f, func(h Head) bool {
		ids = append(ids, h.ID)
		return len(ids) < limit
	})
	return ids, err
}

// merge walks the union of trees in list order, each head once (a head
// in two of them, such as a participant's own ranked record, comes once).
// It pulls from each tree lazily, a bounded batch at a time, so a page
// reads about limit heads from each.
func merge(trees []*btree.BTreeG[Head], fn func(Head) bool) {
	if len(trees) == 1 {
		trees[0].Ascend(fn)
		return
	}
	type cursor struct {
		t    *btree.BTreeG[Head]
		buf  []Head
		done bool
	}
	const batch = 64
	fill := func(c *cursor) {
		var after *Head
		if len(c.buf) > 0 {
			last := c.buf[len(c.buf)-1]
			after = &last
		}
		c.buf = c.buf[:0]
		visit := func(h Head) bool {
			if after != nil && !after.Newer(h) {
				return true // the pivot itself
			}
			c.buf = append(c.buf, h)
			return len(c.buf) < batch
		}
		if after == nil {
			c.t.Ascend(visit)
		} else {
			c.t.AscendGreaterOrEqual(*after, visit)
		}
		c.done = len(c.buf) < batch
	}
	cs := make([]*cursor, len(trees))
	for i, t := range trees {
		cs[i] = &cursor{t: t}
		fill(cs[i])
	}
	var prev *Head
	pos := make([]int, len(cs))
	for {
		best := -1
		for i, c := range cs {
			if pos[i] == len(c.buf) {
				if c.done || len(c.buf) == 0 {
					continue
				}
				fill(c)
				pos[i] = 0
				if len(c.buf) == 0 {
					continue
				}
			}
			if best < 0 || c.buf[pos[i]].Newer(cs[best].buf[pos[best]]) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		h := cs[best].buf[pos[best]]
		pos[best]++
		if prev != nil && prev.ID == h.ID {
			continue
		}
		if !fn(h) {
			return
		}
		prev = &h
	}
}
