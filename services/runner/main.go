// Command runner is the arena's GPU runner: one per GPU, it pulls jobs
// from the RUNNER_JOBS work queue, starts each job's engine, measures it,
// writes GPU samples and request rows to the store, and publishes the
// job's outcome. Without a GPU (no NVML) it watches engines through a
// simulated device, and every figure it publishes says "simulated": true.
//
//	runner --nats nats://nats:4222 --store clickhouse://ch:9000/lowbarena --pod h200-a --work /var/lib/lowbarena/runner
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"time"

	"github.com/lowbarena/lowbarena/services/runner/job"
	"github.com/lowbarena/lowbarena/services/runner/service"
	"github.com/lowbarena/lowbarena/services/runner/telemetry"
	"github.com/lowbarena/lowbarena/services/runtime"
	_ "github.com/lowbarena/lowbarena/services/store/clickhouse"
)

func main() {
	cfg := runtime.DefaultConfig(service.Name)
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	pod := fs.String("pod", runtime.EnvOr("LOWBARENA_POD", "pod-0"), "name of this machine; BF16 references are measured once per pod (env LOWBARENA_POD)")
	work := fs.String("work", runtime.EnvOr("LOWBARENA_RUNNER_WORK", filepath.Join(os.TempDir(), "lowbarena-runner")), "folder of fetched checkpoints (env LOWBARENA_RUNNER_WORK)")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "job ack deadline: a runner that dies is noticed after about this long")
	health := fs.Duration("health-timeout", 10*time.Minute, "longest an engine may take to become healthy")
	idle := fs.Duration("idle-timeout", 60*time.Second, "longest a streaming engine may stay silent")
	interval := fs.Duration("sample-interval", 100*time.Millisecond, "GPU telemetry period")
	runtime.Main(&cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
		jr := job.Runner{SampleInterval: *interval, HealthTimeout: *health, IdleTimeout: *idle, StopGrace: 10 * time.Second}
		src, err := telemetry.Open()
		switch {
		case errors.Is(err, telemetry.ErrNoNVML):
			rt.Log.Warn("no NVML: engines are watched through a simulated GPU and every figure says simulated", "err", err)
		case err != nil:
			return nil, err
		default:
			jr.NVML = src
			rt.Log.Info("GPU telemetry", "gpu", src.GPU())
		}
		s, err := service.New(ctx, rt.Bus, rt.Log, service.Options{Pod: *pod, WorkDir: *work, AckWait: *ackWait, Job: jr, Store: rt.Store})
		if err != nil {
			return nil, err
		}
		return s.Actors(), nil
	})
}
