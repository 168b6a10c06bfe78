package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/campaigns"
	"github.com/lowbarena/lowbarena/platform/stage"
)

// Component is one service, defined once and used both by its own binary
// (Main) and by `arena up`, so that its defaults (timeouts, grace,
// folders) and the stages it serves cannot differ between the two.
//
// A service package exports a constructor returning a fresh Component;
// its settings live in the closures Flags fills and Build reads.
type Component struct {
	// Name names the service: logs, NATS connection, event source.
	Name string
	// Stages are the pipeline stages the service serves, in record
	// order; `arena up` reports the union of its components'.
	Stages []string
	// Store says the service keeps or reads rows (ClickHouse).
	Store bool
	// Flags registers the service's own flags, with their defaults and
	// environment variables, on fs.
	Flags func(fs *flag.FlagSet)
	// Build builds the service's actors once the runtime is up.
	Build func(ctx context.Context, rt *Runtime) ([]Actor, error)
}

// FlagSet returns a flag set holding the shared flags (into cfg) and the
// component's own.
func (c Component) FlagSet(cfg *Config) *flag.FlagSet {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if c.Flags != nil {
		c.Flags(fs)
	}
	return fs
}

// Main is the whole life of the component as its own process (see Main):
// args parsed into the shared and the component's flags, the runtime
// started, the actors run until SIGINT or SIGTERM.
func (c Component) Main(args []string) {
	cfg := DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	Main(&cfg, fs, args, c.Build)
}

// Set sets the component's own flags by name, as `arena up` does for the
// settings it owns (a folder under its data folder, the campaigns);
// a name the component does not have is skipped, so one table of
// settings serves every component.
func Set(fs *flag.FlagSet, values map[string]string) error {
	for name, v := range values {
		if fs.Lookup(name) == nil {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("%w: --%s %q: %w", ErrConfig, name, v, err)
		}
	}
	return nil
}

// StageActor is a bound stage as an actor.
func StageActor(b *stage.Bound) Actor { return Actor{Name: b.Name(), Run: b.Run} }

// Environment variables of the campaign flags.
const (
	// EnvCampaigns names a local campaigns folder that replaces the
	// campaigns bucket (development, tests).
	EnvCampaigns = "LOWBARENA_CAMPAIGNS"
	// EnvCampaignsCache names the folder the campaigns pushed to the
	// store are unpacked into.
	EnvCampaignsCache = "LOWBARENA_CAMPAIGNS_CACHE"
)

// Campaigns are a service's campaign settings: where its campaigns come
// from.
type Campaigns struct {
	// Dir is a local folder of campaign folders that replaces the
	// campaigns bucket; empty (the default) reads the bucket.
	Dir string
	// Cache is where the bucket's campaigns are unpacked, one folder per
	// bundle digest, kept across restarts.
	Cache string
}

// CampaignsFlags registers --campaigns (default $LOWBARENA_CAMPAIGNS,
// else empty: the campaigns bucket) and --campaigns-cache on fs.
func CampaignsFlags(fs *flag.FlagSet) *Campaigns {
	c := &Campaigns{}
	fs.StringVar(&c.Dir, "campaigns", EnvOr(EnvCampaigns, ""),
		"local folder of campaign folders that replaces the arena's campaigns bucket (development, tests); empty: the campaigns pushed with `arena campaign push` (env "+EnvCampaigns+")")
	fs.StringVar(&c.Cache, "campaigns-cache", EnvOr(EnvCampaignsCache, filepath.Join(os.TempDir(), "lowbarena-campaigns")),
		"folder the pushed campaigns are unpacked into, one folder per content digest, re-used after a restart (env "+EnvCampaignsCache+")")
	return c
}

// Open returns the campaigns the service runs: the folder Dir, loaded
// once, or else the campaigns bucket's current versions, with the actor
// that follows the bucket so that a push reaches the service without a
// restart.
func (c *Campaigns) Open(ctx context.Context, rt *Runtime) (campaign.Source, []Actor, error) {
	if c.Dir != "" {
		set, err := LoadCampaigns(c.Dir, rt.Log)
		if err != nil {
			return nil, nil, err
		}
		return set, nil, nil
	}
	kv, err := rt.Bus.JetStream().KeyValue(ctx, bus.BucketCampaigns)
	if err != nil {
		return nil, nil, fmt.Errorf("campaigns bucket %s (provision the arena with this version): %w", bus.BucketCampaigns, err)
	}
	arts, err := artifact.NewJetStream(ctx, rt.Bus.JetStream(), bus.ObjectArtifacts)
	if err != nil {
		return nil, nil, err
	}
	live, err := campaigns.Open(ctx, kv, arts, c.Cache, rt.Log.With("campaigns", bus.BucketCampaigns))
	if err != nil {
		return nil, nil, err
	}
	rt.Log.Info("campaigns from the campaigns bucket", "tasks", strings.Join(live.Tasks(), ","), "cache", c.Cache)
	return live, []Actor{{Name: "campaigns", Run: live.Run}}, nil
}

// LoadCampaigns loads the campaigns in dir. A folder that does not exist
// is an arena with no campaign yet: the service runs, says so, and
// refuses every submission with campaign_unknown_task. Any other problem
// (a campaign that does not load) is an error at start.
func LoadCampaigns(dir string, log *slog.Logger) (campaign.Set, error) {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		log.Warn("no campaigns folder; every submission will be refused until one exists (arena example DIR writes one)", "folder", dir)
		return campaign.Set{}, nil
	}
	set, err := campaign.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	log.Info("campaigns loaded", "folder", dir, "tasks", strings.Join(set.Tasks(), ","))
	return set, nil
}
