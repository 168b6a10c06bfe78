package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Puller hands a durable's messages to a handler one at a time, on
// demand: nothing is pulled ahead of the handler, so a busy process holds
// no message another could take. Each message is handled exactly as
// Consume handles it (the same ack semantics, heartbeats, dead letters).
// It is the step that Next, and loops built outside the bus (package
// workqueue), are made of.
type Puller struct {
	b    *Bus
	cfg  ConsumerConfig
	cons jetstream.Consumer
	hb   *heartbeat
}

// Puller creates or updates the durable consumer cfg (see
// EnsureConsumer) and returns a puller of its messages, whose heartbeat
// runs until Close.
func (b *Bus) Puller(ctx context.Context, cfg ConsumerConfig) (*Puller, error) {
	cfg = cfg.withDefaults()
	cons, err := b.EnsureConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	hb := newHeartbeat(cfg.AckWait/3, b.log.With("consumer", cfg.Name))
	go hb.run()
	return &Puller{b: b, cfg: cfg, cons: cons, hb: hb}, nil
}

// Name is the durable's name.
func (p *Puller) Name() string { return p.cfg.Name }

// Next asks the server for one message, waiting up to wait, and handles
// it as Consume would. It reports whether a message came, the outcome it
// was settled with (the handler's, or Poison for a message dead-lettered
// before the handler ran) and an error when the fetch failed; no message
// within wait is not an error. Its settlement is sent, not waited for
// (see FlushAcks).
func (p *Puller) Next(ctx context.Context, wait time.Duration, handler Handler) (out Outcome, handled bool, err error) {
	batch, err := p.cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		return Outcome{}, false, fmt.Errorf("bus: fetch from %s: %w", p.cfg.Name, err)
	}
	for m := range batch.Messages() {
		out = p.b.handle(ctx, p.cfg, m, handler, p.hb)
		handled = true
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return out, handled, fmt.Errorf("bus: fetch from %s: %w", p.cfg.Name, err)
	}
	return out, handled, nil
}

// Close stops the puller's heartbeat; call it once no handler runs.
func (p *Puller) Close() { p.hb.stop() }

// Next handles the next message of the durable consumer cfg (created or
// updated first) exactly as Consume would, waiting up to wait for one, and
// returns the outcome it settled: the handler's, or Poison for a message
// dead-lettered before the handler ran. It is for tests and tools that
// step a consumer one message at a time; ErrNoMessage when none came.
func (b *Bus) Next(ctx context.Context, cfg ConsumerConfig, wait time.Duration, handler Handler) (Outcome, error) {
	p, err := b.Puller(ctx, cfg)
	if err != nil {
		return Outcome{}, err
	}
	defer p.Close()
	out, handled, err := p.Next(ctx, wait, handler)
	if !handled {
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{}, ErrNoMessage
	}
	if err := b.FlushAcks(ctx); err != nil {
		return out, fmt.Errorf("bus: flush the settlement of %s: %w", p.cfg.Name, err)
	}
	return out, nil
}

// ErrNoMessage is returned by Next when no message came in time.
var ErrNoMessage = errors.New("bus: no message")

// FlushAcks returns once the server has answered a ping sent after every
// ack and nak sent so far: they are on the wire, and a caller that closes
// the connection next loses none of them. It runs on a context of its own
// (see settleContext), so a consumer that is stopping still flushes.
func (b *Bus) FlushAcks(ctx context.Context) error {
	fctx, cancel := settleContext(ctx)
	defer cancel()
	return b.nc.FlushWithContext(fctx)
}

// Logger is the bus's logger, for loops built on it outside the package.
func (b *Bus) Logger() *slog.Logger { return b.log }
