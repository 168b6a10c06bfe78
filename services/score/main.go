// Command score is the arena's score stage: it joins each submission's
// contract, quality and efficiency outcomes, scores it under the scoring
// policy, writes the scores table and publishes score.completed; it
// answers `arena rescore`, `arena leaderboard` and `arena history`.
//
//	score --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --policy lowb-score/v1
package main

import (
	"context"
	"flag"
	"os"

	"github.com/lowbarena/lowbarena/services/runtime"
	"github.com/lowbarena/lowbarena/services/domain/policy"
	"github.com/lowbarena/lowbarena/services/score/service"
	_ "github.com/lowbarena/lowbarena/services/store/clickhouse"
)

func main() {
	cfg := runtime.DefaultConfig(service.Name)
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	pol := fs.String("policy", runtime.EnvOr("LOWBARENA_SCORE_POLICY", policy.Default), "scoring policy version of new scores (env LOWBARENA_SCORE_POLICY)")
	runtime.Main(&cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
		s, err := service.New(ctx, rt.Bus, rt.Log, service.Options{Policy: *pol, Store: rt.Store})
		if err != nil {
			return nil, err
		}
		return s.Actors(), nil
	})
}
