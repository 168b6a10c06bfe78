package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events/reason"
)

// ErrConsumerMismatch is matched (errors.Is) by a *ConsumerMismatchError:
// a durable consumer the server holds whose configuration differs from the
// code's in a way the server cannot change in place.
var ErrConsumerMismatch = errors.New(string(reason.ConsumerConfigMismatch))

// FieldDrift is one setting of a durable consumer on which the server and
// the code differ, both as the server holds them (the code's max deliver
// is -1, unlimited, whatever ConsumerConfig.MaxDeliver says: see jsConfig).
type FieldDrift struct {
	// Field names the setting: filter_subjects, ack_policy, ack_wait,
	// max_deliver or deliver_policy.
	Field string
	// Server is the durable's value on the server; Code the value this
	// service's code sets.
	Server, Code string
	// InPlace says the server can change it on the durable as it stands
	// (its queue and position kept).
	InPlace bool
}

// ConsumerMismatchError refuses a durable consumer that drifted from the
// code's configuration in settings the server cannot change in place (see
// EnsureConsumer): it names the consumer, each such setting with the
// server's value and the code's, and what the operator does about it.
type ConsumerMismatchError struct {
	Stream, Consumer string
	// Fields are the settings refused (never an InPlace one).
	Fields []FieldDrift
}

// Error is the refusal's sentence, starting with its code.
func (e *ConsumerMismatchError) Error() string {
	var diffs, names []string
	for _, f := range e.Fields {
		diffs = append(diffs, fmt.Sprintf("%s is %s on the server, %s in this service's code", f.Field, f.Server, f.Code))
		names = append(names, f.Field)
	}
	return fmt.Sprintf("%s: the durable consumer %s on stream %s: %s. The server cannot change a durable's %s in place, and no provision mode does: "+
		"as the operator, remove the durable (nats consumer rm %s %s) and start the service again, which creates it as its code sets it "+
		"(a deliver-all durable reads its stream again from the start, which its idempotent handlers allow; a deliver-new one starts at its end). "+
		"A durable's filter subjects, ack wait and max deliver are updated in place at start, keeping its queue and position",
		reason.ConsumerConfigMismatch, e.Consumer, e.Stream, strings.Join(diffs, "; "), strings.Join(names, " and "), e.Stream, e.Consumer)
}

// Is makes errors.Is(err, ErrConsumerMismatch) hold.
func (e *ConsumerMismatchError) Is(target error) bool { return target == ErrConsumerMismatch }

// ConsumerDrift compares a durable's configuration on the server (have)
// with the code's (want), in the settings that decide what it delivers and
// how often: filter subjects (as a set: one filter or several), ack
// policy, ack wait, max deliver and deliver policy. Settings the code does
// not own (its description, metadata, a server default) are not compared.
func ConsumerDrift(have, want jetstream.ConsumerConfig) []FieldDrift {
	var out []FieldDrift
	if h, w := filters(have), filters(want); !slices.Equal(h, w) {
		out = append(out, FieldDrift{Field: "filter_subjects", Server: fmt.Sprint(h), Code: fmt.Sprint(w), InPlace: true})
	}
	if have.AckPolicy != want.AckPolicy {
		out = append(out, FieldDrift{Field: "ack_policy", Server: have.AckPolicy.String(), Code: want.AckPolicy.String()})
	}
	if have.AckWait != want.AckWait {
		out = append(out, FieldDrift{Field: "ack_wait", Server: have.AckWait.String(), Code: want.AckWait.String(), InPlace: true})
	}
	if have.MaxDeliver != want.MaxDeliver {
		out = append(out, FieldDrift{Field: "max_deliver", Server: fmt.Sprint(have.MaxDeliver), Code: fmt.Sprint(want.MaxDeliver), InPlace: true})
	}
	if have.DeliverPolicy != want.DeliverPolicy {
		out = append(out, FieldDrift{Field: "deliver_policy", Server: have.DeliverPolicy.String(), Code: want.DeliverPolicy.String()})
	}
	return out
}

// filters is a consumer's filter subjects, sorted ([] for none).
func filters(c jetstream.ConsumerConfig) []string {
	out := slices.Clone(c.FilterSubjects)
	if c.FilterSubject != "" {
		out = append(out, c.FilterSubject)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkDrift reads the durable cfg names from the server and compares it
// with cfg (see ConsumerDrift). A durable that does not exist yet has
// none. Settings the server cannot change are refused with a
// *ConsumerMismatchError, before anything is sent that would change the
// durable; the rest are returned, to be updated in place.
func (b *Bus) checkDrift(ctx context.Context, cfg ConsumerConfig) ([]FieldDrift, error) {
	var info *jetstream.ConsumerInfo
	err := b.Guard(ctx, func(ctx context.Context) error {
		c, err := b.js.Consumer(ctx, cfg.Stream, cfg.Name)
		if err != nil {
			return err
		}
		info = c.CachedInfo()
		return nil
	}, "$JS.API.CONSUMER.INFO."+cfg.Stream+"."+cfg.Name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bus: look up consumer %s on %s: %w", cfg.Name, cfg.Stream, err)
	}
	drift := ConsumerDrift(info.Config, cfg.jsConfig())
	var refused []FieldDrift
	for _, f := range drift {
		if !f.InPlace {
			refused = append(refused, f)
		}
	}
	if len(refused) > 0 {
		return nil, &ConsumerMismatchError{Stream: cfg.Stream, Consumer: cfg.Name, Fields: refused}
	}
	return drift, nil
}
