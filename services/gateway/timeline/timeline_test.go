package timeline

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// model is what the bucket holds, kept by the test beside it: the
// expected page is computed from it by sorting and filtering every head,
// independently of the index.
type model map[string]Head

func (m model) page(f Filter, limit int) []string {
	var hs []Head
	for _, h := range m {
		if f.Match(h) {
			hs = append(hs, h)
		}
	}
	sort.Slice(hs, func(i, j int) bool {
		if !hs[i].CreatedAt.Equal(hs[j].CreatedAt) {
			return hs[i].CreatedAt.After(hs[j].CreatedAt)
		}
		return hs[i].ID < hs[j].ID
	})
	ids := []string{}
	for _, h := range hs {
		if len(ids) == limit {
			break
		}
		ids = append(ids, h.ID)
	}
	return ids
}

var (
	people = []string{"alice", "bob", "carol", "dave"}
	splits = []string{participant.SplitRanked, "dev", ""}
)

// filters are every kind of viewer against every participant filter,
// names that hold no record among them.
func filters() []Filter {
	viewers := []participant.Viewer{{}, {Kind: participant.KindOperator, Name: "ops"}, {Kind: participant.KindParticipant, Name: "alice"},
		{Kind: participant.KindParticipant, Name: "bob"}, {Kind: participant.KindParticipant, Name: "nobody"}, {Kind: participant.KindParticipant}}
	var out []Filter
	for _, v := range viewers {
		for _, who := range append([]string{"", "nobody"}, people...) {
			out = append(out, Filter{Viewer: v, Participant: who})
		}
	}
	return out
}

// TestIndexAgainstModel: over random records written to a real bucket
// (ties in created_at, values that do not decode, updates that move a
// record in time or between splits, deletes and purges), every filter's
// page of the index is the page computed from every record, before and
// after the changes, and in an index rebuilt from the bucket (a
// restart).
func TestIndexAgainstModel(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(19, 5))
	m := model{}
	t0 := time.Unix(1760000000, 0).UTC()
	put := func(id string) {
		h := Head{ID: id, CreatedAt: t0.Add(time.Duration(rng.IntN(40)) * time.Second), Participant: people[rng.IntN(len(people))], Split: splits[rng.IntN(len(splits))]}
		body, err := json.Marshal(map[string]any{"id": h.ID, "created_at": h.CreatedAt, "participant": h.Participant, "split": h.Split, "status": "running"})
		require.NoError(t, err)
		_, err = kv.Put(ctx, id, body)
		require.NoError(t, err)
		m[id] = h
	}
	for i := range 300 {
		put(fmt.Sprintf("s%04d", i))
	}
	// A value that does not decode is in no list.
	_, err = kv.Put(ctx, "corrupt", []byte(`{"id": "corrupt", "created_at": 7`))
	require.NoError(t, err)

	// Half the records are written before the index starts (its first
	// pass), half while it runs.
	x := New(kv)
	require.ErrorIs(t, x.Walk(Filter{}, func(Head) bool { return true }), ErrNotReady)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- x.Run(runCtx) }()
	for i := 300; i < 600; i++ {
		put(fmt.Sprintf("s%04d", i))
	}
	check := func(x *Index, phase string) {
		require.NoError(t, x.Sync(ctx, time.Minute), phase)
		require.Equal(t, len(m), x.Len(), phase)
		for _, f := range filters() {
			for _, limit := range []int{1, 7, 50, 1000} {
				got, err := x.Page(f, limit)
				require.NoError(t, err)
				require.Equal(t, m.page(f, limit), got, "%s: viewer %+v, participant %q, limit %d", phase, f.Viewer, f.Participant, limit)
			}
		}
	}
	check(x, "written")

	for i := range 200 {
		id := fmt.Sprintf("s%04d", rng.IntN(600))
		switch {
		case i%5 == 0:
			require.NoError(t, kv.Delete(ctx, id))
			delete(m, id)
		case i%7 == 0:
			require.NoError(t, kv.Purge(ctx, id))
			delete(m, id)
		default:
			put(id) // a new time, participant or split
		}
	}
	check(x, "changed")
	stop()
	require.NoError(t, <-done)

	// A restart: a new index reads the bucket again.
	y := New(kv)
	go func() { done <- y.Run(ctx) }()
	check(y, "rebuilt")
}

// BenchmarkIndexPage is one page of 50 read from the index at 1k, 10k
// and 100k records, for an operator (one tree) and a participant (the
// ranked records merged with its own): flat across sizes is the
// O(limit + log n) the index is for. The index is filled directly (no
// bucket): this is the index alone.
func BenchmarkIndexPage(b *testing.B) {
	x := New(nil)
	x.ready = true
	t0 := time.Unix(1760000000, 0).UTC()
	held := 0
	for _, n := range []int{1000, 10000, 100000} {
		for ; held < n; held++ {
			h := Head{ID: fmt.Sprintf("%016x", held), CreatedAt: t0.Add(time.Duration(held) * time.Second), Participant: fmt.Sprintf("p%d", held%97), Split: splits[held%2]}
			x.put(h)
		}
		for _, f := range []Filter{{Viewer: participant.Viewer{Kind: participant.KindOperator}}, {Viewer: participant.Viewer{Kind: participant.KindParticipant, Name: "p3"}}} {
			b.Run(fmt.Sprintf("records=%d/viewer=%s", n, f.Viewer.Kind), func(b *testing.B) {
				for b.Loop() {
					ids, err := x.Page(f, 50)
					if err != nil || len(ids) != 50 {
						b.Fatal(len(ids), err)
					}
				}
			})
		}
	}
}
