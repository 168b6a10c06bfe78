package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEngineLogBounds: a line over maxLine is kept to maxLine bytes of
// whole characters and marked; the start-up log stops at maxStartup with
// a mark line, while the tail goes on.
func TestEngineLogBounds(t *testing.T) {
	t.Parallel()
	l := newEngineLog(3)
	l.maxLine, l.maxStartup = 8, 100
	// Written in pieces, as a pipe delivers it; "é" is 2 bytes and would
	// straddle the 8-byte cut.
	for _, p := range []string{"first\nabcdefg", "é and more\nshort\n", "0123456789012345678\n", "late one\n", "partial"} {
		n, err := l.Write([]byte(p))
		require.NoError(t, err)
		require.Equal(t, len(p), n)
	}
	require.Equal(t, strings.Join([]string{
		"first",
		"abcdefg [line cut: 11 more bytes not kept]",
		"short",
		"01234567 [line cut: 11 more bytes not kept]",
		"[start-up log cut: more than 100 bytes; the lines after this were not kept]",
	}, "\n"), l.Startup())
	require.Equal(t, "short\n01234567 [line cut: 11 more bytes not kept]\nlate one\npartial", l.String(),
		"the tail: the last 3 lines, each cut the same way, and the line being written")
}

// TestEngineLogStartupEndsWhenHealthy: lines after the grace that follows
// the healthy mark are in the tail only; the line being written counts
// while the engine starts.
func TestEngineLogStartupEndsWhenHealthy(t *testing.T) {
	t.Parallel()
	l := newEngineLog(10)
	_, _ = fmt.Fprint(l, "config line\nloading")
	require.Equal(t, "config line\nloading", l.Startup())
	l.markHealthy()
	l.healthyAt = l.healthyAt.Add(-startupGrace) // the grace has passed
	_, _ = fmt.Fprint(l, " done\nserving\n")
	require.Equal(t, "config line", l.Startup())
	require.Equal(t, "config line\nloading done\nserving", l.String())
}
