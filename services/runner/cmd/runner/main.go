// Command runner is the arena's GPU runner: one per GPU, it pulls jobs
// from the RUNNER_JOBS work queue, starts each job's engine, measures it,
// writes GPU samples and request rows to the store, and publishes the
// job's outcome. Without a GPU (no NVML) it watches simengine through its
// simulated device, every figure it publishes says "simulated": true, and
// it refuses real engines (no_gpu_telemetry).
//
// It makes itself a child subreaper: in a container it is PID 1 anyway,
// and elsewhere an engine's orphans (a vLLM EngineCore whose API server
// exited first) come back to it rather than to the machine's init, and
// it reaps its engines' process groups (engine.Stop). arena up, which
// runs the same component, does not: orphans of its other children go to
// the machine's init as before.
//
//	runner --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --pod h200-a --work /var/lib/lowbarena/runner
package main

import (
	"fmt"
	"os"

	_ "github.com/lowbarena/lowbarena/platform/store/clickhouse"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/runner/engine"
)

func main() {
	// The engine sandbox runs this binary as its helper (see
	// engine.RunHelper): that run never reaches the runner.
	engine.RunHelper()
	if err := engine.BecomeSubreaper(); err != nil {
		fmt.Fprintf(os.Stderr, "runner: not a child subreaper (an engine's orphans go to init): %v\n", err)
	}
	runner.Component().Main(os.Args[1:])
}
