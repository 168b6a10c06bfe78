package workqueue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lowbarena/lowbarena/platform/bus"
)

// ConsumeFirst handles the messages of several durables one at a time,
// preferring the earlier ones, until ctx is cancelled. When idle it asks
// each durable in order for one message, waiting up to wait on each, and
// after every message handled it starts again from the first: a message
// of cfgs[0] waits at most about len(cfgs)*wait while the handler is
// idle. It is for long handlers that must hold one message at a time (a
// GPU runner): nothing is pulled ahead of the handler, so a busy process
// holds no message another could take. Each message is handled exactly as
// bus.Consume handles it (the same ack semantics, heartbeats every
// AckWait/3, dead letters); the durables are created or updated first, in
// order (a caller whose durables must change in another order, a work
// queue's filters that may not overlap meanwhile, ensures them first).
//
// On cancellation the message in hand is settled (a handler told to stop
// asks for a retry, which hands it back at once) and its settlement
// flushed before ConsumeFirst returns nil.
func ConsumeFirst(ctx context.Context, b *bus.Bus, cfgs []bus.ConsumerConfig, wait time.Duration, handler bus.Handler) error {
	return ConsumeFirstWhen(ctx, b, cfgs, wait, nil, handler)
}

// ConsumeFirstWhen is ConsumeFirst that asks durable i only while open(i)
// is true (nil: always): a closed durable keeps its messages for other
// processes. A runner closes its shared durable while a round holds its
// pod. open is read before each fetch, so a message fetched just before
// it closed is still handled; when every durable is closed the loop
// waits wait before it asks again.
func ConsumeFirstWhen(ctx context.Context, b *bus.Bus, cfgs []bus.ConsumerConfig, wait time.Duration, open func(i int) bool, handler bus.Handler) error {
	if len(cfgs) == 0 {
		return errors.New("workqueue: ConsumeFirst needs a consumer")
	}
	if wait <= 0 {
		wait = time.Second
	}
	log := b.Logger()
	ps := make([]*bus.Puller, len(cfgs))
	for i, c := range cfgs {
		p, err := b.Puller(ctx, c)
		if err != nil {
			return err
		}
		defer p.Close()
		ps[i] = p
	}
	defer func() {
		if err := b.FlushAcks(ctx); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			log.Warn("flushing acks at drain", "consumer", ps[0].Name(), "err", err)
		}
	}()
	for ctx.Err() == nil {
		handled, asked := false, false
		for i, p := range ps {
			if ctx.Err() != nil {
				return nil
			}
			if open != nil && !open(i) {
				continue
			}
			asked = true
			if handled = pull(ctx, p, wait, handler, log); handled {
				break // the next message: from the first durable again
			}
		}
		if !asked {
			sleep(ctx, wait)
		}
	}
	return nil
}

// pull asks p for one message and handles it, and reports whether one
// came. A failed fetch (the server or the connection is away) is logged
// and followed by a wait, as Consume's pull loop does.
func pull(ctx context.Context, p *bus.Puller, wait time.Duration, handler bus.Handler, log *slog.Logger) bool {
	_, handled, err := p.Next(ctx, wait, handler)
	if err != nil && ctx.Err() == nil {
		log.Warn("fetch error", "consumer", p.Name(), "err", err)
		sleep(ctx, wait)
	}
	return handled
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
