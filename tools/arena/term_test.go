package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTermOffATerminal: written to a file or a pipe, lines are plain and
// a progress is printed once per tenth it reaches, and when it ends.
func TestTermOffATerminal(t *testing.T) {
	var b bytes.Buffer
	tm := newTerm(&b)
	require.False(t, tm.tty)
	tm.Printf("job started")
	for _, pct := range []int{0, 3, 9, 10, 15, 55, 56, 99} {
		tm.Progress("j", "staging "+bar(pct, 10), pct, false)
	}
	tm.Progress("j", "staging done", 100, true)
	tm.Progress("j", "again "+bar(0, 10), 0, false) // a new progress of the same key starts over
	require.Equal(t, strings.Join([]string{
		"job started",
		"staging [..........]",
		"staging [#.........]",
		"staging [#####.....]",
		"staging [#########.]",
		"staging done",
		"again [..........]",
	}, "\n")+"\n", b.String())
}

// TestTermOnATerminal: live lines stay at the bottom and are redrawn in
// place (cursor up, clear to the end of the screen) when anything is
// written; an ended progress becomes a permanent line.
func TestTermOnATerminal(t *testing.T) {
	var b bytes.Buffer
	tm := &term{w: &b, tty: true, tenth: map[string]int{}}
	tm.Progress("a", "A 10%", 10, false)
	tm.Progress("b", "B 50%", 50, false)
	tm.Printf("a line")
	tm.Progress("a", "A 20%", 20, false)
	tm.Progress("a", "A done", 100, true)
	const up2, up1 = "\r\x1b[2A\x1b[J", "\r\x1b[1A\x1b[J"
	require.Equal(t, ""+
		"A 10%\n"+
		up1+"A 10%\nB 50%\n"+
		up2+"a line\nA 10%\nB 50%\n"+
		up2+"A 20%\nB 50%\n"+
		up2+"A done\nB 50%\n", b.String())
	require.Equal(t, 1, tm.drawn)
}

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		pct  int
		want string
	}{{-5, "[.....]"}, {0, "[.....]"}, {19, "[.....]"}, {20, "[#....]"}, {100, "[#####]"}, {250, "[#####]"}} {
		require.Equal(t, tc.want, bar(tc.pct, 5), "%d%%", tc.pct)
	}
}
