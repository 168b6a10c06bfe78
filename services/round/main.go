// Command round runs the arena's rounds: on one pod, the in-round BF16
// baseline, the reigning leader and up to five candidates through the GPU
// runner, step by step, and the leader settled from their scores.
//
//	round --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --campaigns /etc/lowbarena/campaigns --pod h200-a
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/round/service"
	"github.com/lowbarena/lowbarena/services/runtime"
	_ "github.com/lowbarena/lowbarena/services/store/clickhouse"
)

func main() {
	cfg := runtime.DefaultConfig(service.Name)
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	dir := fs.String("campaigns", runtime.EnvOr("LOWBARENA_CAMPAIGNS", "campaigns"), "folder of campaign folders (env LOWBARENA_CAMPAIGNS)")
	pod := fs.String("pod", runtime.EnvOr("LOWBARENA_POD", "pod-0"), "default pod of a round (env LOWBARENA_POD)")
	drift := fs.Float64("drift-threshold", 0.05, "mark a round whose drift baseline moved more than this share of the baseline's rate")
	runtime.Main(&cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
		set, err := campaign.LoadDir(*dir)
		if err != nil {
			return nil, fmt.Errorf("round: %w", err)
		}
		s, err := service.New(ctx, rt.Bus, rt.Log, service.Options{Campaigns: set, Store: rt.Store, Pod: *pod, DriftThreshold: *drift})
		if err != nil {
			return nil, err
		}
		return s.Actors(), nil
	})
}
