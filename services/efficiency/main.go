// Command efficiency is the arena's efficiency stage: for every kept
// contract it requests a GPU runner job that measures the checkpoint
// beside its campaign's BF16 reference on one pod and replays it under its
// budget, then publishes the record's efficiency block.
//
//	efficiency --nats nats://nats:4222 --campaigns /etc/lowbarena/campaigns
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/efficiency/service"
	"github.com/lowbarena/lowbarena/services/runtime"
)

func main() {
	cfg := runtime.DefaultConfig(service.Name)
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	dir := fs.String("campaigns", runtime.EnvOr("LOWBARENA_CAMPAIGNS", "campaigns"), "folder of campaign folders (env LOWBARENA_CAMPAIGNS)")
	runtime.Main(&cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
		set, err := campaign.LoadDir(*dir)
		if err != nil {
			return nil, fmt.Errorf("efficiency: %w", err)
		}
		s, err := service.New(ctx, rt.Bus, rt.Log, service.Options{Campaigns: set})
		if err != nil {
			return nil, err
		}
		return s.Actors(), nil
	})
}
