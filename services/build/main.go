// Command build is the arena's build stage: it consumes
// submission.received, checks and digests each uploaded bundle, stores it
// as a content-addressed artifact and publishes build.completed or
// build.failed.
//
//	build --nats nats://nats:4222 --work /var/lib/lowbarena/build
package main

import (
	"context"
	"flag"
	"os"

	"github.com/lowbarena/lowbarena/services/build/service"
	"github.com/lowbarena/lowbarena/services/build/unpack"
	"github.com/lowbarena/lowbarena/services/runtime"
	_ "github.com/lowbarena/lowbarena/services/store/clickhouse"
)

func main() {
	cfg := runtime.DefaultConfig(service.Name)
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	lim := unpack.DefaultLimits()
	work := fs.String("work", runtime.EnvOr("LOWBARENA_BUILD_WORK", os.TempDir()), "folder where bundles are unpacked while checked (env LOWBARENA_BUILD_WORK)")
	fs.IntVar(&lim.MaxFiles, "max-files", lim.MaxFiles, "most files a bundle may hold")
	fs.Int64Var(&lim.MaxBytes, "max-bytes", lim.MaxBytes, "most bytes a bundle may hold, unpacked")
	fs.Int64Var(&lim.MaxFileBytes, "max-file-bytes", lim.MaxFileBytes, "most bytes one file of a bundle may hold")
	runtime.Main(&cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
		s, err := service.New(ctx, rt.Bus, rt.Log, service.Options{WorkDir: *work, Limits: lim})
		if err != nil {
			return nil, err
		}
		return s.Actors(), nil
	})
}
