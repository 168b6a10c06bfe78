// Package service is the score stage: it joins each submission's
// submission.received and its contract, quality and efficiency outcomes
// as they arrive, in any order (the join lives in the score_inputs KV
// bucket, so it survives restarts and duplicates), computes the dev_score
// under the scoring policy, writes it to the scores table and publishes
// score.completed. It needs no other service's state: who submitted and
// on which split come from the submission's own event.
//
// It also answers requests on nats.go/micro (service ctl.ServiceScore):
// the CLI's leaderboard, history and rescore from stored data, and the
// round service's standing of a submission from its join; and, as the
// component that holds the store wherever the arena runs, read-only SQL
// (service ctl.ServiceQuery, see ServeSQL).
package score

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/policy"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/retention"
)

// Name is the score service's name: its event source and durable.
const Name = "score"

// EnvPolicy names the environment variable of --policy.
const EnvPolicy = "LOWBARENA_SCORE_POLICY"

// Options configure the stage.
type Options struct {
	// Policy is the version new scores use; default policy.Default.
	Policy string
	// Store receives scores rows and answers queries (required).
	Store store.Store
	// ReplyChunkBytes bounds one chunk of a chunked reply of rows (0: the
	// connection's max_payload; tests set less to cut many chunks).
	ReplyChunkBytes int
	// Retention is the periodic telemetry retention; its zero value runs
	// none.
	Retention Retention
}

// Service is the score stage.
type Service struct {
	bus    *bus.Bus
	inputs jetstream.KeyValue
	// arena is the ARENA stream, read for the submission.received of an
	// entry joined without it (see withSubmission).
	arena  jetstream.Stream
	policy policy.Policy
	opts   Options
	log    *slog.Logger
}

// New opens the bucket and the stream the stage reads and loads its
// policy.
func New(ctx context.Context, b *bus.Bus, log *slog.Logger, o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("score: a store is required (the scores table)")
	}
	if o.Policy == "" {
		o.Policy = policy.Default
	}
	if log == nil {
		log = slog.Default()
	}
	p, err := policy.Load(o.Policy)
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	js := b.JetStream()
	in, err := js.KeyValue(ctx, bus.BucketScoreInputs)
	if err != nil {
		return nil, fmt.Errorf("score: open bucket %s: %w", bus.BucketScoreInputs, err)
	}
	arena, err := js.Stream(ctx, events.StreamArena)
	if err != nil {
		return nil, fmt.Errorf("score: open stream %s: %w", events.StreamArena, err)
	}
	return &Service{bus: b, inputs: in, arena: arena, policy: p, opts: o, log: log}, nil
}

// Consumer is the stage's durable on the submission and the three
// outcomes it joins.
var Consumer = bus.ConsumerConfig{
	Name: "score",
	Subjects: []string{events.Contract.Completed.Filter(), events.Quality.Completed.Filter(),
		events.Efficiency.Completed.Filter(), events.Submission.Received.Filter()},
	Prefetch: 8,
}

// Actors returns the stage's consumer and its micro services.
func (s *Service) Actors() []app.Actor {
	actors := []app.Actor{
		{Name: "score", Run: func(ctx context.Context) error { return s.bus.Consume(ctx, Consumer, s.Handle) }},
		{Name: "score-requests", Run: s.serveRequests},
		{Name: "query-requests", Run: func(ctx context.Context) error { return ServeSQL(ctx, s.bus.Conn(), s.opts.Store, s.log) }},
	}
	if s.opts.Retention.Every > 0 {
		actors = append(actors, app.Actor{Name: "retention", Run: retentionActor(s.opts.Store, s.opts.Retention, s.log)})
	}
	return actors
}

// Component is the score service, for its command and `arena up`.
func Component() app.Component {
	var pol, every, olderThan string
	return app.Component{
		Name:   Name,
		Stages: []string{Name},
		Store:  true,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&pol, "policy", app.EnvOr(EnvPolicy, policy.Default), "scoring policy version of new scores (env "+EnvPolicy+")")
			fs.StringVar(&every, "retention-every", app.EnvOr(EnvRetentionEvery, "0"),
				"drop gpu_samples and requests partitions past --retention-older-than at start and then this often, e.g. 24h; 0 drops none (env "+EnvRetentionEvery+")")
			fs.StringVar(&olderThan, "retention-older-than", app.EnvOr(EnvRetentionOlderThan, retention.FormatAge(DefaultRetentionAge)),
				"age past which the periodic retention drops telemetry: days like 30d or a duration, at least 1d (env "+EnvRetentionOlderThan+")")
		},
		Build: func(ctx context.Context, rt *app.Runtime) ([]app.Actor, error) {
			ret, err := parseRetention(every, olderThan)
			if err != nil {
				return nil, err
			}
			s, err := New(ctx, rt.Bus, rt.Log, Options{Policy: pol, Store: rt.Store, Retention: ret})
			if err != nil {
				return nil, err
			}
			return s.Actors(), nil
		},
	}
}
