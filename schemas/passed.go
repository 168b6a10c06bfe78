package schemas

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// passedCacheBytes bounds the payload bytes the validator remembers: a
// few thousand events of the usual size, whatever the traffic.
const passedCacheBytes = 4 << 20

// passedCache remembers payloads that passed validation, by event type and
// exact bytes, in two generations: entries go to the current one, and once
// it holds half the budget it becomes the old one and the previous old one
// is dropped, so the cache never holds more than its budget and keeps the
// most recent payloads. A payload over an eighth of the budget is never
// remembered.
//
// Invariant: has(t, d) is true only for a type and bytes that equal, byte
// for byte, a pair add was given; the hash only finds the candidate.
type passedCache struct {
	seed   maphash.Seed
	budget int

	mu       sync.Mutex
	cur, old map[uint64]passedEntry
	curBytes int
}

type passedEntry struct {
	typ  string
	data []byte
}

func newPassedCache(budget int) *passedCache {
	return &passedCache{seed: maphash.MakeSeed(), budget: budget, cur: map[uint64]passedEntry{}, old: map[uint64]passedEntry{}}
}

func (c *passedCache) key(typ string, data []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	_, _ = h.WriteString(typ)
	_ = h.WriteByte(0)
	_, _ = h.Write(data)
	return h.Sum64()
}

func (c *passedCache) has(typ string, data []byte) bool {
	if len(data) > c.budget/8 {
		return false
	}
	k := c.key(typ, data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cur[k]; ok && e.typ == typ && bytes.Equal(e.data, data) {
		return true
	}
	if e, ok := c.old[k]; ok && e.typ == typ && bytes.Equal(e.data, data) {
		return true
	}
	return false
}

func (c *passedCache) add(typ string, data []byte) {
	if len(data) > c.budget/8 {
		return
	}
	k := c.key(typ, data)
	// A copy: the caller's buffer may be reused (a NATS message's).
	e := passedEntry{typ: typ, data: bytes.Clone(data)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.curBytes+len(data) > c.budget/2 {
		c.old, c.cur, c.curBytes = c.cur, make(map[uint64]passedEntry, len(c.cur)), 0
	}
	c.cur[k] = e
	c.curBytes += len(data) + len(typ)
}
