package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// term writes what a person follows. Lines are permanent; progress is
// shown as live lines (bars) that a terminal redraws in place at the
// bottom, under the permanent lines, so that a long download is one line
// that moves rather than a screenful. Written to something that is not a
// terminal (a file, a pipe, a test), each progress is a permanent line,
// printed when it moves on by a tenth and when it ends. It is safe for
// concurrent use.
type term struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool
	// live are the progress lines on screen, in the order they began;
	// drawn is how many of them the terminal shows now.
	live  []liveLine
	drawn int
	// tenth is the last tenth printed per key (not a terminal).
	tenth map[string]int
}

type liveLine struct{ key, text string }

// newTerm returns a term on w; redrawing in place only when w is a
// terminal (a character device) whose TERM is not "dumb".
func newTerm(w io.Writer) *term {
	t := &term{w: w, tenth: map[string]int{}}
	if f, ok := w.(*os.File); ok && os.Getenv("TERM") != "dumb" {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			t.tty = true
		}
	}
	return t
}

// Printf writes a permanent line (or lines).
func (t *term) Printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clear()
	s := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	_, _ = io.WriteString(t.w, s)
	t.draw()
}

// Write writes p as permanent lines, so a term can stand for an
// io.Writer (renderRecord writes a record through it in one piece).
func (t *term) Write(p []byte) (int, error) {
	t.Printf("%s", p)
	return len(p), nil
}

// Progress shows the live line of key: text, whose progress is pct (0 to
// 100). done ends it: the line becomes permanent.
func (t *term) Progress(key, text string, pct int, done bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.tty {
		tenth := min(max(pct, 0), 100) / 10
		if last, seen := t.tenth[key]; seen && !done && tenth <= last {
			return
		}
		t.tenth[key] = tenth
		if done {
			delete(t.tenth, key)
		}
		_, _ = io.WriteString(t.w, text+"\n")
		return
	}
	t.clear()
	i := t.find(key)
	switch {
	case done:
		if i >= 0 {
			t.live = append(t.live[:i], t.live[i+1:]...)
		}
		_, _ = io.WriteString(t.w, text+"\n")
	case i >= 0:
		t.live[i].text = text
	default:
		t.live = append(t.live, liveLine{key, text})
	}
	t.draw()
}

func (t *term) find(key string) int {
	for i, l := range t.live {
		if l.key == key {
			return i
		}
	}
	return -1
}

// clear erases the live lines on screen (a terminal only); t.mu is held.
func (t *term) clear() {
	if !t.tty || t.drawn == 0 {
		return
	}
	// Up to the first live line, then clear to the end of the screen.
	fmt.Fprintf(t.w, "\r\x1b[%dA\x1b[J", t.drawn)
	t.drawn = 0
}

// draw writes the live lines under the permanent ones; t.mu is held.
func (t *term) draw() {
	if !t.tty {
		return
	}
	for _, l := range t.live {
		_, _ = io.WriteString(t.w, l.text+"\n")
	}
	t.drawn = len(t.live)
}

// bar is a progress bar of width cells for pct percent: [#####.....].
func bar(pct, width int) string {
	pct = min(max(pct, 0), 100)
	n := pct * width / 100
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
