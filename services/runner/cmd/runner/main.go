// Command runner is the arena's GPU runner: one per GPU, it pulls jobs
// from the RUNNER_JOBS work queue, starts each job's engine, measures it,
// writes GPU samples and request rows to the store, and publishes the
// job's outcome. Without a GPU (no NVML) it watches engines through a
// simulated device, and every figure it publishes says "simulated": true.
//
//	runner --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --pod h200-a --work /var/lib/lowbarena/runner
package main

import (
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/runner"
)

func main() { runner.Component().Main(os.Args[1:]) }
