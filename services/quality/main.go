// Command quality is the arena's quality stage: for every kept contract it
// requests a GPU runner job that answers the campaign's eval suite (and
// one for the BF16 reference, once per campaign and suite version), pairs
// the graded items, and publishes the record's dev_quality block. It needs
// the store, where the runners write quality_items.
//
//	quality --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --campaigns /etc/lowbarena/campaigns
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/lowbarena/lowbarena/services/domain/campaign"
	"github.com/lowbarena/lowbarena/services/quality/service"
	"github.com/lowbarena/lowbarena/services/runtime"
	_ "github.com/lowbarena/lowbarena/services/store/clickhouse"
)

func main() {
	cfg := runtime.DefaultConfig(service.Name)
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	dir := fs.String("campaigns", runtime.EnvOr("LOWBARENA_CAMPAIGNS", "campaigns"), "folder of campaign folders (env LOWBARENA_CAMPAIGNS)")
	runtime.Main(&cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
		set, err := campaign.LoadDir(*dir)
		if err != nil {
			return nil, fmt.Errorf("quality: %w", err)
		}
		s, err := service.New(ctx, rt.Bus, rt.Log, service.Options{Campaigns: set, Store: rt.Store})
		if err != nil {
			return nil, err
		}
		return s.Actors(), nil
	})
}
