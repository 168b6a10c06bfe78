package engine

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// What the runner keeps of an engine's output.
const (
	// MaxLineBytes is the longest line kept whole; a longer one is kept
	// to this length and ends with a mark that says how much was cut.
	MaxLineBytes = 64 << 10
	// MaxStartupLogBytes bounds the start-up log (StartupLog): past it,
	// one mark line says the rest was not kept.
	MaxStartupLogBytes = 32 << 20
)

// startupGrace is how long after the engine answered healthy its lines
// still count as start-up lines: what it wrote before it answered may still
// be in the pipe the runner reads its output from.
const startupGrace = 500 * time.Millisecond

// engineLog is an engine's output, as lines: all of them from the start
// until the engine is healthy (the start-up log, bounded), and the last
// max of them (the tail).
type engineLog struct {
	mu sync.Mutex
	// maxLine and maxStartup are MaxLineBytes and MaxStartupLogBytes
	// (smaller in tests).
	maxLine, maxStartup int

	tail []string
	max  int

	// partial is the line being written, dropped how many of its bytes
	// were beyond maxLine.
	partial []byte
	dropped int

	startup      []string
	startupBytes int
	// startupFull is set once the start-up log reached maxStartup;
	// healthyAt when the engine became healthy (the start-up log ends
	// startupGrace later).
	startupFull bool
	healthyAt   time.Time
}

func newEngineLog(tailLines int) *engineLog {
	return &engineLog{max: tailLines, maxLine: MaxLineBytes, maxStartup: MaxStartupLogBytes}
}

// Write splits p into lines; it never fails.
func (l *engineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		chunk, rest, eol := bytes.Cut(p, []byte{'\n'})
		l.add(chunk)
		if !eol {
			break
		}
		l.push(l.line())
		l.partial, l.dropped = l.partial[:0], 0
		p = rest
	}
	return n, nil
}

// add appends chunk to the line being written, up to maxLine bytes (whole
// characters); the rest is counted, not kept.
func (l *engineLog) add(chunk []byte) {
	room := l.maxLine - len(l.partial)
	if l.dropped > 0 || room <= 0 {
		l.dropped += len(chunk)
		return
	}
	take := min(room, len(chunk))
	if take < len(chunk) {
		for take > 0 && !utf8.RuneStart(chunk[take]) {
			take--
		}
	}
	l.partial = append(l.partial, chunk[:take]...)
	l.dropped += len(chunk) - take
}

// line is the line being written, with the mark of a cut.
func (l *engineLog) line() string {
	if l.dropped > 0 {
		return string(l.partial) + fmt.Sprintf(" [line cut: %d more bytes not kept]", l.dropped)
	}
	return string(l.partial)
}

func (l *engineLog) push(line string) {
	l.tail = append(l.tail, line)
	if len(l.tail) > l.max {
		l.tail = l.tail[len(l.tail)-l.max:]
	}
	if !l.starting() || l.startupFull {
		return
	}
	if l.startupBytes+len(line)+1 > l.maxStartup {
		l.startupFull = true
		l.startup = append(l.startup, fmt.Sprintf("[start-up log cut: more than %d bytes; the lines after this were not kept]", l.maxStartup))
		return
	}
	l.startup = append(l.startup, line)
	l.startupBytes += len(line) + 1
}

// starting reports whether the engine's lines are still start-up lines.
func (l *engineLog) starting() bool {
	return l.healthyAt.IsZero() || time.Since(l.healthyAt) < startupGrace
}

// markHealthy ends the start-up log (startupGrace from now).
func (l *engineLog) markHealthy() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.healthyAt.IsZero() {
		l.healthyAt = time.Now()
	}
}

// String is the tail: the last max lines and the line being written.
func (l *engineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := strings.Join(l.tail, "\n")
	if len(l.partial) > 0 || l.dropped > 0 {
		out += "\n" + l.line()
	}
	return strings.TrimSpace(out)
}

// Startup is the start-up log: every line until the engine became healthy
// (until now, the line being written included, while it starts), within
// maxStartup.
func (l *engineLog) Startup() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.startup
	if l.starting() && !l.startupFull && (len(l.partial) > 0 || l.dropped > 0) {
		lines = append(lines[:len(lines):len(lines)], l.line())
	}
	return strings.Join(lines, "\n")
}
