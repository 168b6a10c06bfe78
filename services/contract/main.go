// Command contract is the arena's contract stage: it consumes
// build.completed, reads config.json and the safetensors headers of each
// built bundle from the artifact store, checks them against the campaign's
// source model and the participant's declaration, and publishes
// contract.completed or contract.failed.
//
//	contract --nats nats://nats:4222 --campaigns /etc/lowbarena/campaigns
package main

import (
	"context"
	"flag"
	"os"

	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/contract/service"
	"github.com/lowbarena/lowbarena/services/runtime"
	_ "github.com/lowbarena/lowbarena/services/store/clickhouse"
)

func main() {
	cfg := runtime.DefaultConfig(service.Name)
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	dir := fs.String("campaigns", runtime.EnvOr("LOWBARENA_CAMPAIGNS", "campaigns"), "folder of campaign folders (campaign.json, config.json, tensors.json each) (env LOWBARENA_CAMPAIGNS)")
	runtime.Main(&cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
		set, err := campaign.LoadDir(*dir)
		if err != nil {
			return nil, err
		}
		rt.Log.Info("campaigns loaded", "tasks", set.Tasks())
		s, err := service.New(ctx, rt.Bus, rt.Log, service.Options{Campaigns: set})
		if err != nil {
			return nil, err
		}
		return s.Actors(), nil
	})
}
