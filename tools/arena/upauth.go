//go:build embedded

package main

// The embedded server's side of the arena's NATS users (`arena up`):
// TLS, the credentials each of its own clients connects with, and
// provisioning as the operator.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/campaigns"
)

// serverTLS are the embedded NATS server's TLS files.
type serverTLS struct {
	cert, key, ca string
}

func (t *serverTLS) register(fs *flag.FlagSet) {
	fs.StringVar(&t.cert, "nats-tls-cert", os.Getenv("LOWBARENA_NATS_TLS_CERT"), "certificate of the embedded NATS server: clients must then connect over TLS (env LOWBARENA_NATS_TLS_CERT)")
	fs.StringVar(&t.key, "nats-tls-key", os.Getenv("LOWBARENA_NATS_TLS_KEY"), "key of that certificate (env LOWBARENA_NATS_TLS_KEY)")
	fs.StringVar(&t.ca, "nats-tls-ca", os.Getenv("LOWBARENA_NATS_TLS_CA"), "CA that signed that certificate, which this arena's own services trust (env LOWBARENA_NATS_TLS_CA; clients: "+app.EnvNATSCA+")")
}

// configure turns TLS on in opts when a certificate is given. Clients
// prove who they are with their nkeys; TLS encrypts the connection and
// proves the server's identity.
func (t serverTLS) configure(opts *server.Options) error {
	if t.cert == "" && t.key == "" {
		if t.ca != "" {
			return usageErr("--nats-tls-ca needs --nats-tls-cert and --nats-tls-key")
		}
		return nil
	}
	if t.cert == "" || t.key == "" {
		return usageErr("--nats-tls-cert and --nats-tls-key go together")
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.cert, KeyFile: t.key})
	if err != nil {
		return usageErr("NATS TLS: %v", err)
	}
	opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, tc, 2
	return nil
}

// auth are the credentials user connects to this arena's NATS with.
func (a *arenaProc) auth(user string) app.NATSAuth {
	return app.NATSAuth{CredsFile: a.creds.SeedFile(user)}
}

// clientTLS is what this arena's own clients need to trust its server.
func (a *arenaProc) clientTLS() app.NATSTLS { return app.NATSTLS{CA: a.tls.ca} }

// provision creates or updates the arena's streams, buckets and object
// stores as the operator, before any service starts: the services'
// users may not.
func (a *arenaProc) provision(ctx context.Context) error {
	nc, err := app.ConnectNATS(app.NATSClient{URLs: a.natsURL, Name: "arena-up", User: access.Operator,
		Auth: a.auth(access.Operator), TLS: a.clientTLS()}, a.log)
	if err != nil {
		return fmt.Errorf("up: connect as the operator: %w", err)
	}
	defer nc.Close()
	b, err := bus.New(nc, bus.WithLogger(a.log))
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.Guard(pctx, func(ctx context.Context) error {
		return bus.Provision(ctx, b.JetStream(), bus.Topology{Replicas: 1})
	}, "$JS.API.STREAM.>"); err != nil {
		return fmt.Errorf("up: provision the arena's streams: %w", err)
	}
	return nil
}

// pushCampaigns pushes the campaign folders of dir into the store as the
// operator (the same path as `arena campaign push`), so that the stages
// read them from there as they do in a cluster, and returns the tasks
// the arena runs. A dir that does not exist pushes nothing: the stages
// run what earlier pushes left in DATA/nats, or nothing.
func (a *arenaProc) pushCampaigns(ctx context.Context, dir string) ([]string, error) {
	c, err := a.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	defer c.close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if _, err := os.Stat(dir); err == nil {
		pushed, err := pushCampaigns(pctx, c.js, dir)
		if err != nil {
			return nil, fmt.Errorf("up: push the campaigns of %s: %w", dir, err)
		}
		for _, p := range pushed {
			a.log.Info("campaign pushed", "task", p.TaskID, "version", p.Version, "digest", p.Digest(), "new", p.New, "folder", dir)
		}
	} else {
		a.log.Warn("no campaigns folder to push; the stages run the campaigns already in the store (arena example DIR writes one, arena campaign push DIR pushes one)", "folder", dir)
	}
	kv, err := c.js.KeyValue(pctx, bus.BucketCampaigns)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	list, err := campaigns.List(pctx, kv)
	if err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	tasks := make([]string, len(list))
	for i, e := range list {
		tasks[i] = e.TaskID
	}
	return tasks, nil
}

// pushCampaigns pushes the campaign folders of dir into the arena js
// reaches, as `arena campaign push` does; `arena up` and the cluster
// harness push their campaigns with it.
func pushCampaigns(ctx context.Context, js jetstream.JetStream, dir string) ([]campaigns.Pushed, error) {
	kv, err := js.KeyValue(ctx, bus.BucketCampaigns)
	if err != nil {
		return nil, fmt.Errorf("campaigns bucket: %w", err)
	}
	arts, err := artifact.NewJetStream(ctx, js, bus.ObjectArtifacts)
	if err != nil {
		return nil, err
	}
	return campaigns.Push(ctx, kv, arts, dir, pusher(), time.Now)
}

// dial connects to this arena as the operator.
func (a *arenaProc) dial(ctx context.Context) (*client, error) {
	return dialWith(ctx, a.natsURL, a.auth(access.Operator), a.clientTLS(), credentialsDir(a.data))
}

// demoOperatorToken is the demo operator's API token, asked of the
// gateway as this arena's operator (its own credentials, whatever the
// environment says).
func (a *arenaProc) demoOperatorToken(ctx context.Context) (string, error) {
	c, err := a.dial(ctx)
	if err != nil {
		return "", err
	}
	defer c.close()
	return demoOperatorToken(ctx, c)
}
