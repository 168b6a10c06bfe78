package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/lowbarena/lowbarena/domain/campaign"
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

// EnvCampaigns names the campaigns folder's environment variable.
const EnvCampaigns = "LOWBARENA_CAMPAIGNS"

// CampaignsFlag registers --campaigns on fs (default $LOWBARENA_CAMPAIGNS,
// else "campaigns") and returns its value.
func CampaignsFlag(fs *flag.FlagSet) *string {
	return fs.String("campaigns", EnvOr(EnvCampaigns, "campaigns"), "folder of campaign folders (campaign.json, config.json, tensors.json each) (env "+EnvCampaigns+")")
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
