package hub

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRateLimitWait: the wait a rate-limited answer asks for, from the
// IETF draft's RateLimit (as the Hugging Face hub sends it), its older
// RateLimit-Remaining and RateLimit-Reset, or Retry-After.
func TestRateLimitWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		headers map[string]string
		wait    time.Duration
		known   bool
	}{
		{name: "the hub's", headers: map[string]string{"RateLimit": `"resolvers";r=0;t=120`, "RateLimit-Policy": `"fixed window";"resolvers";q=3000;w=300`},
			wait: 121 * time.Second, known: true},
		{name: "several policies, the exhausted one's", headers: map[string]string{"RateLimit": `"api";r=12;t=5, "resolvers";r=0;t=40`}, wait: 41 * time.Second, known: true},
		{name: "requests left: not a reset to wait", headers: map[string]string{"RateLimit": `"resolvers";r=3;t=120`}},
		{name: "the older draft", headers: map[string]string{"RateLimit-Remaining": "0", "RateLimit-Reset": "9"}, wait: 10 * time.Second, known: true},
		{name: "Retry-After in seconds", headers: map[string]string{"Retry-After": "7"}, wait: 7 * time.Second, known: true},
		{name: "Retry-After as a date", headers: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, wait: 90 * time.Second, known: true},
		{name: "a date past", headers: map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, wait: 0, known: true},
		{name: "a wait beyond reason", headers: map[string]string{"RateLimit": `"resolvers";r=0;t=99999999999`}, wait: MaxRetryAfter, known: true},
		{name: "nothing said", headers: map[string]string{}},
		{name: "garbage", headers: map[string]string{"Retry-After": "soon", "RateLimit": "r=x"}},
	}
	for _, tc := range cases {
		h := http.Header{}
		for k, v := range tc.headers {
			h.Set(k, v)
		}
		wait, known := rateLimitWait(h, now)
		require.Equal(t, tc.known, known, tc.name)
		require.Equal(t, tc.wait, wait, tc.name)
	}
}

// TestRangeInside: which Range requests a 416 is retried for.
func TestRangeInside(t *testing.T) {
	t.Parallel()
	require.True(t, rangeInside("bytes=0-7", 100))
	require.True(t, rangeInside("bytes=99-", 100))
	require.False(t, rangeInside("bytes=100-", 100))
	require.False(t, rangeInside("", 100))
	require.False(t, rangeInside("bytes=-5", 100))
}
