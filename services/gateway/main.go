// Command gateway keeps the submission records: it folds every pipeline
// event into the record of its submission (JetStream KV bucket
// "submissions"), writes stage results to the store, and serves the
// records over HTTP.
//
//	gateway --nats nats://nats:4222 --store clickhouse://clickhouse:9000/lowbarena --http :8080
package main

import (
	"context"
	"flag"
	"os"

	"github.com/lowbarena/lowbarena/services/gateway/service"
	"github.com/lowbarena/lowbarena/services/runtime"
	_ "github.com/lowbarena/lowbarena/services/store/clickhouse"
)

func main() {
	cfg := runtime.DefaultConfig(service.Name)
	fs := flag.NewFlagSet(service.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	httpAddr := fs.String("http", runtime.EnvOr("LOWBARENA_HTTP", "127.0.0.1:8080"), "listen address of the HTTP API (env LOWBARENA_HTTP)")
	runtime.Main(&cfg, fs, os.Args[1:], func(ctx context.Context, rt *runtime.Runtime) ([]runtime.Actor, error) {
		g, err := service.New(ctx, rt, service.Options{HTTPAddr: *httpAddr})
		if err != nil {
			return nil, err
		}
		rt.Log.Info("HTTP API listening", "addr", g.Addr.String())
		return g.Actors, nil
	})
}
