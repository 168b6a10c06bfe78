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

	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// natsFlag adds --nats to fs, defaulting to LOWBARENA_NATS_URL.
func natsFlag(fs *flag.FlagSet) *string {
	def := os.Getenv(app.EnvNATSURL)
	if def == "" {
		def = app.DefaultNATSURL
	}
	return fs.String("nats", def, "NATS URL of the arena (env "+app.EnvNATSURL+")")
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

// dial connects to the arena's NATS as the operator (see cliAuth for
// where the credentials come from, app.TLSFromEnv for TLS) and checks
// that the arena's streams exist, with errors that say what to do.
func dial(ctx context.Context, url string) (*client, error) {
	auth, dir := cliAuth()
	return dialWith(ctx, url, auth, app.TLSFromEnv(), dir)
}

// dialWith is dial with the given credentials; dir is where the
// operator's seed was looked for, for the error that says so.
func dialWith(ctx context.Context, url string, auth app.NATSAuth, tls app.NATSTLS, dir string) (*client, error) {
	nc, err := app.ConnectNATS(app.NATSClient{URLs: url, Name: "arena-cli", User: access.Operator, Auth: auth, TLS: tls}, nil)
	switch {
	case errors.Is(err, app.ErrNATSUnreachable):
		return nil, fmt.Errorf("%w: nothing answers at %s (start it with `arena up`, or point --nats / %s at it): %w", ErrArenaDown, url, app.EnvNATSURL, err)
	case errors.Is(err, app.ErrNATSAuth) && !auth.Set():
		return nil, fmt.Errorf("%w (nats_auth_failed): NATS at %s wants credentials and none were found: run this where `arena up` keeps its data (%s=DIR, looked in %s), or set %s to the operator's seed file, or %s and %s", ErrArenaAuth,
			url, EnvData, dir, app.EnvNATSCreds, app.EnvNATSUser, app.EnvNATSPassword)
	case errors.Is(err, app.ErrNATSAuth):
		return nil, fmt.Errorf("%w (nats_auth_failed): NATS at %s refused %s: use the operator's credentials of this arena (DIR/credentials/operator.nk of its data folder)", ErrArenaAuth, url, auth.Describe())
	case err != nil:
		return nil, err
	}
	b, err := bus.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	js := b.JetStream()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A user other than the operator may not use the operator's inboxes
	// or read the stream: the server refuses it at once, and so does this.
	err = b.Guard(cctx, func(ctx context.Context) error { return bus.CheckProvisioned(ctx, js) }, "$JS.API.>", "_INBOX.>")
	if err != nil {
		nc.Close()
		if errors.Is(err, bus.ErrDenied) {
			return nil, fmt.Errorf("%w (%w): %s are not the operator's", ErrArenaAuth, err, auth.Describe())
		}
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

// serviceWait is how long a command asks again a service that does not
// answer (ctl.CallWaiting): one that is restarting answers within it, and
// an arena whose service is down is told after it.
var serviceWait = 5 * time.Second

func (c *client) submissions(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, bus.BucketSubmissions)
	if err != nil {
		return nil, fmt.Errorf("open the submissions bucket: %w", err)
	}
	return kv, nil
}
