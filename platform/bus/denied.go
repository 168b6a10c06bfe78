package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lowbarena/lowbarena/events/reason"
)

// ErrDenied matches every *DeniedError.
var ErrDenied = errors.New("bus: permission denied")

// DeniedError is an operation the NATS server refused because the
// connection's user may not do it: a publish (events, acks, KV writes,
// JetStream API requests) or a subscription outside its permissions.
// Code is reason.PermissionDenied.
type DeniedError struct {
	// Op is "publish" or "subscribe".
	Op string
	// Subject is the subject the server refused.
	Subject string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s: NATS refused to let this user %s on %s (its permissions do not allow it)", e.Code(), e.Op, e.Subject)
}

// Code is the stable reason code of a refused operation.
func (e *DeniedError) Code() reason.Code { return reason.PermissionDenied }

// Is makes errors.Is(err, ErrDenied) true.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// The server's words (nats-server client.go), as nats.go passes them to
// the connection's async error handler.
var (
	rePubDenied = regexp.MustCompile(`Permissions Violation for Publish to ("(?:[^"\\]|\\.)*")`)
	reSubDenied = regexp.MustCompile(`Permissions Violation for Subscription to ("(?:[^"\\]|\\.)*")`)
)

// ParseDenied returns the refusal an async error of the NATS connection
// reports, or nil when err is not a permissions violation.
func ParseDenied(err error) *DeniedError {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	msg := err.Error()
	for op, re := range map[string]*regexp.Regexp{"publish": rePubDenied, "subscribe": reSubDenied} {
		if m := re.FindStringSubmatch(msg); m != nil {
			subject, uerr := strconv.Unquote(m[1])
			if uerr != nil {
				subject = strings.Trim(m[1], `"`)
			}
			return &DeniedError{Op: op, Subject: subject}
		}
	}
	return &DeniedError{Op: "publish", Subject: "?"}
}

// denials routes the server's refusals on one connection to the
// operations waiting on them. A refusal arrives asynchronously (the
// server answers a refused publish with -ERR, never with a reply), so an
// operation that waits for a reply registers the subjects it will use
// first, and is cancelled with a *DeniedError as soon as the server
// refuses one, instead of waiting out its deadline.
type denials struct {
	mu      sync.Mutex
	next    int
	waiters map[int]denialWaiter
	counter metric.Int64Counter
}

type denialWaiter struct {
	patterns []string
	cancel   context.CancelCauseFunc
}

// watchDenials installs d on nc's async error handler, keeping the handler
// nc had (it still sees every error).
func watchDenials(nc *nats.Conn, counter metric.Int64Counter) *denials {
	d := &denials{waiters: map[int]denialWaiter{}, counter: counter}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		d.refused(err)
		if prev != nil {
			prev(c, s, err)
		}
	})
	return d
}

func (d *denials) refused(err error) {
	de := ParseDenied(err)
	if de == nil {
		return
	}
	if d.counter != nil {
		d.counter.Add(context.Background(), 1, metric.WithAttributes(attribute.String("op", de.Op)))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.waiters {
		for _, p := range w.patterns {
			if MatchSubject(p, de.Subject) {
				w.cancel(de)
				break
			}
		}
	}
}

// guard returns a context cancelled with a *DeniedError when the server
// refuses a subject matching one of patterns (NATS wildcards), and a
// function that stops watching (call it when the operation ends).
func (d *denials) guard(ctx context.Context, patterns ...string) (context.Context, func()) {
	gctx, cancel := context.WithCancelCause(ctx)
	d.mu.Lock()
	id := d.next
	d.next++
	d.waiters[id] = denialWaiter{patterns: patterns, cancel: cancel}
	d.mu.Unlock()
	return gctx, func() {
		d.mu.Lock()
		delete(d.waiters, id)
		d.mu.Unlock()
		cancel(nil)
	}
}

// denied returns the *DeniedError that cancelled ctx, or err as it is.
func denied(ctx context.Context, err error) error {
	var de *DeniedError
	if err != nil && errors.As(context.Cause(ctx), &de) {
		return de
	}
	return err
}

// Guard runs op under a context that is cancelled with a *DeniedError as
// soon as the NATS server refuses this connection a subject matching one
// of patterns, and returns op's error, or that refusal when it is why op
// failed. Wrap calls that wait for a reply on a subject the user might not
// be allowed (a KV write, a JetStream API request), so a refusal is an
// error with its code at once instead of a timeout.
func (b *Bus) Guard(ctx context.Context, op func(ctx context.Context) error, patterns ...string) error {
	gctx, stop := b.denials.guard(ctx, patterns...)
	defer stop()
	return denied(gctx, op(gctx))
}

// MatchSubject reports whether subject matches pattern by NATS's rules:
// "*" is one token, a final ">" one or more. Wildcards in subject are
// taken literally, as the server takes the filter in a consumer's create
// subject.
func MatchSubject(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" && i == len(pt)-1 {
			return len(st) > i
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}
