package podlease_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/podlease"
)

func TestRead(t *testing.T) {
	now := time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC)
	lease := func(exp time.Time) []byte {
		b, err := json.Marshal(podlease.Lease{Round: "round-a", Holder: "round-x", ExpiresAt: exp})
		require.NoError(t, err)
		return b
	}
	for _, c := range []struct {
		name  string
		value []byte
		state podlease.State
		round string
	}{
		{"free", nil, podlease.Free, ""},
		{"held", lease(now.Add(time.Second)), podlease.Held, "round-a"},
		{"expired", lease(now.Add(-time.Second)), podlease.Expired, "round-a"},
		{"expires now", lease(now), podlease.Expired, "round-a"},
		{"garbage", []byte("{not json"), podlease.Expired, ""},
		{"no round", []byte(`{"holder":"x","expires_at":"2027-01-01T00:00:00Z"}`), podlease.Expired, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, state := podlease.Read(c.value, now)
			require.Equal(t, c.state, state, state.String())
			require.Equal(t, c.round, l.Round)
		})
	}
}
