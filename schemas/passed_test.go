package schemas

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestValidateRemembersOnlyWhatPassed: a payload that passed is not
// checked again, and nothing else rides on it: a failure is never
// remembered, and the same bytes under another type, or other bytes under
// the same type, are checked on their own.
func TestValidateRemembersOnlyWhatPassed(t *testing.T) {
	v, err := NewValidator()
	require.NoError(t, err)
	const started = "dev.lowbarena.build.started.v1"
	const failed = "dev.lowbarena.build.failed.v1"
	good := []byte(`{"submission_id":"b0c4e95f426f48e2","stage":"build","attempt":1}`)
	cases := []struct {
		name  string
		typ   string
		data  []byte
		valid bool
	}{
		{"a good payload", started, good, true},
		{"the same again, from memory", started, good, true},
		{"the same bytes under a type they fail", failed, good, false},
		{"and again: a failure is not remembered", failed, good, false},
		{"a wrong stage", started, []byte(`{"submission_id":"b0c4e95f426f48e2","stage":"Build","attempt":1}`), false},
		{"one byte shorter than the good one", started, good[:len(good)-1], false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Validate(tc.typ, tc.data)
			if tc.valid {
				require.NoError(t, err)
				require.True(t, v.passed.has(tc.typ, tc.data))
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			require.False(t, v.passed.has(tc.typ, tc.data))
		})
	}
}

// TestPassedCacheIsExact: a candidate found by its hash is taken only when
// its type and bytes are equal to what is asked, so a collision (forced
// here by planting another payload under the key) passes nothing.
func TestPassedCacheIsExact(t *testing.T) {
	c := newPassedCache(1 << 20)
	typ := "dev.lowbarena.build.started.v1"
	asked := []byte(`{"stage":"build"}`)
	k := c.key(typ, asked)
	cases := []struct {
		name    string
		planted passedEntry
		want    bool
	}{
		{"the same type and bytes", passedEntry{typ, []byte(`{"stage":"build"}`)}, true},
		{"other bytes under the key", passedEntry{typ, []byte(`{"stage":"BUILD"}`)}, false},
		{"another type under the key", passedEntry{"dev.lowbarena.build.failed.v1", asked}, false},
		{"a prefix under the key", passedEntry{typ, asked[:5]}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.cur = map[uint64]passedEntry{k: tc.planted}
			c.old = map[uint64]passedEntry{}
			require.Equal(t, tc.want, c.has(typ, asked))
			c.cur, c.old = c.old, c.cur
			require.Equal(t, tc.want, c.has(typ, asked), "the old generation too")
		})
	}
}

// TestPassedCacheStaysWithinItsBudget: however many payloads pass, the
// cache holds at most its budget, keeps the most recent ones and never
// holds a payload over an eighth of it.
func TestPassedCacheStaysWithinItsBudget(t *testing.T) {
	const budget = 64 << 10
	c := newPassedCache(budget)
	typ := "t"
	payload := func(i int) []byte { return []byte(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", 200))) }
	const n = 5000
	for i := range n {
		c.add(typ, payload(i))
		held := 0
		for _, e := range c.cur {
			held += len(e.data)
		}
		for _, e := range c.old {
			held += len(e.data)
		}
		require.LessOrEqual(t, held, budget)
	}
	require.True(t, c.has(typ, payload(n-1)), "the last payload is remembered")
	require.False(t, c.has(typ, payload(0)), "the first is long gone")
	big := []byte(`"` + strings.Repeat("y", budget/8) + `"`)
	c.add(typ, big)
	require.False(t, c.has(typ, big), "a payload over an eighth of the budget is not remembered")
}
