package round

import (
	"context"
	"flag"
	"time"

	"github.com/lowbarena/lowbarena/platform/app"
)

// Component is the round service as its binary and `arena up` run it:
// --campaigns, --drift-threshold, --lease-ttl and --entry-timeout. It has
// no pod of its own: each round names one a live runner serves, or takes
// the only one (see Service.Start).
// It serves no pipeline stage; its round_steps rows go to the runtime's
// store when there is one.
func Component() app.Component {
	var (
		camps        *app.Campaigns
		drift        *float64
		leaseTTL     *time.Duration
		entryTimeout *time.Duration
	)
	return app.Component{
		Name:  Name,
		Store: true,
		Flags: func(fs *flag.FlagSet) {
			camps = app.CampaignsFlags(fs)
			drift = fs.Float64("drift-threshold", DefaultDrift, "mark a round whose drift baseline moved more than this share of the baseline's rate")
			leaseTTL = fs.Duration("lease-ttl", DefaultLeaseTTL, "how long a pod's lease lasts unless renewed; a dead instance's round is taken over after it")
			entryTimeout = fs.Duration("entry-timeout", DefaultEntryTimeout, "longest an entry's SLA job may take, queue time included")
		},
		Build: func(ctx context.Context, rt *app.Runtime) ([]app.Actor, error) {
			set, follow, err := camps.Open(ctx, rt)
			if err != nil {
				return nil, err
			}
			s, err := New(ctx, rt.Bus, rt.Log, Options{Campaigns: set, Store: rt.Store, DriftThreshold: *drift,
				LeaseTTL: *leaseTTL, EntryTimeout: *entryTimeout})
			if err != nil {
				return nil, err
			}
			return append(s.Actors(), follow...), nil
		},
	}
}
