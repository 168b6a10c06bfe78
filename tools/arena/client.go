package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events/bus"
	"github.com/lowbarena/lowbarena/services/runtime"
)

// natsFlag adds --nats to fs, defaulting to LOWBARENA_NATS_URL.
func natsFlag(fs *flag.FlagSet) *string {
	def := os.Getenv(runtime.EnvNATSURL)
	if def == "" {
		def = runtime.DefaultNATSURL
	}
	return fs.String("nats", def, "NATS URL of the arena (env "+runtime.EnvNATSURL+")")
}

// newFlagSet returns a flag set that reports its errors as usage errors.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("arena "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, letting flags come after positional arguments
// (arena show ID --json) as people type them.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &exitError{code: 0, err: errors.New("")}
			}
			return nil, &exitError{code: exitUsage, err: errors.New("")}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// ErrArenaDown says that nothing answers where the arena should be.
var ErrArenaDown = errors.New("the arena is not running")

// client is a connection to a running arena.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// dial connects to the arena's NATS and checks that the arena's streams
// exist, with errors that say what to do.
func dial(ctx context.Context, url string) (*client, error) {
	nc, err := nats.Connect(url, nats.Name("arena-cli"), nats.Timeout(3*time.Second), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("%w: nothing answers at %s (start it with `arena up`, or point --nats / %s at it): %v", ErrArenaDown, url, runtime.EnvNATSURL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := bus.CheckProvisioned(cctx, js); err != nil {
		nc.Close()
		if errors.Is(err, bus.ErrNotProvisioned) {
			return nil, fmt.Errorf("%w: NATS answers at %s but the arena's streams are not there (start the arena with `arena up`)", ErrArenaDown, url)
		}
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w: NATS at %s has no JetStream", ErrArenaDown, url)
		}
		return nil, err
	}
	return &client{nc: nc, js: js}, nil
}

func (c *client) close() { c.nc.Close() }

func (c *client) submissions(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return nil, fmt.Errorf("open the submissions bucket: %w", err)
	}
	return kv, nil
}
