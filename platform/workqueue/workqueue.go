// Package workqueue is what the consumers of a work queue need beyond the
// bus's consume loop: a loop for long handlers that hold one message at
// a time and prefer some durables to others (ConsumeFirst), and a
// dead-letter hook through which the owner of work that was given up ends
// it (OnDeadLetter). Its client is the GPU runner.
//
// It builds on two extension points of package bus: bus.Puller, which
// handles a durable's messages one at a time exactly as bus.Consume does,
// and bus.DeadLetterPolicy, which the loop asks before it dead-letters a
// message.
package workqueue

import (
	"context"
	"errors"

	"github.com/lowbarena/lowbarena/platform/bus"
)

// ErrStillHeld, returned (wrapped) by a Hook, says that the message's work
// still runs under an earlier delivery elsewhere (a live handler whose
// heartbeat the server missed): the message is not dead-lettered but comes
// back in a third of AckWait to be asked about again, and a live handler's
// ack removes it meanwhile.
var ErrStillHeld = errors.New("still held by a live handler")

// ErrSettled, returned (wrapped) by a Hook, says that the message's work
// has ended already (its outcome is stored: an earlier delivery's handler
// published it and died, or lost its ack, before the ack reached the
// server): the message is acked, not dead-lettered, and nothing is given
// up.
var ErrSettled = errors.New("its work has ended already")

// Hook is told of every message about to be dead-lettered whose event
// decoded and passed its schema, before its dead-letter copy is stored:
// the owner of work that was given up (a runner's job, MaxDeliver
// deliveries without an outcome) publishes its end there, so whoever waits
// on it hears. It must be idempotent (a dead letter repeated after a crash
// calls it again): derive what it publishes from the event's id.
//
// It returns nil to let the dead letter go on. Any other error keeps the
// message (Nak'ed for another try, as a failed dead-letter publish is): it
// comes back and the hook is asked again, however many deliveries that
// takes. ErrStillHeld and ErrSettled say the work is not to be given up
// (still running elsewhere; ended already).
type Hook func(ctx context.Context, dl bus.DeadLetter) error

// OnDeadLetter returns the dead-letter policy that asks hook (set it as a
// bus.ConsumerConfig's DeadLetterPolicy): ErrSettled acks the message,
// ErrStillHeld keeps it, another error keeps it as a failure, nil
// dead-letters it.
func OnDeadLetter(hook Hook) bus.DeadLetterPolicy {
	return func(ctx context.Context, dl bus.DeadLetter) (bus.DeadLetterVerdict, error) {
		err := hook(ctx, dl)
		switch {
		case errors.Is(err, ErrSettled):
			return bus.Settled, err
		case errors.Is(err, ErrStillHeld):
			return bus.Keep, err
		default:
			return bus.GiveUp, err
		}
	}
}
