package check

import (
	"flag"
	"regexp"
	"sort"

	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/services/build"
	"github.com/lowbarena/lowbarena/services/contract"
	"github.com/lowbarena/lowbarena/services/efficiency"
	"github.com/lowbarena/lowbarena/services/gateway"
	"github.com/lowbarena/lowbarena/services/quality"
	"github.com/lowbarena/lowbarena/services/round"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/score"
)

// Binary is what one service binary reads: its flags, the environment
// variables its flags name, the NATS user it connects as.
type Binary struct {
	// Name is the binary's name, built from services/<Name>/cmd/<Name>.
	Name string
	// Flags are its flags' names (without dashes).
	Flags map[string]bool
	// Env are the environment variables it reads: those its flags name
	// ("(env LOWBARENA_X)" in their usage) and the NATS client's
	// credentials and TLS variables, which no flag names.
	Env map[string]bool
	// Store says it keeps or reads rows: it needs LOWBARENA_STORE.
	Store bool
	// Campaigns says it reads campaigns (its --campaigns, a local folder
	// that replaces the campaigns bucket when set).
	Campaigns bool
	// User is its NATS user (platform/access).
	User string
	// Defaults are its flags' default values, by name.
	Defaults map[string]string
}

// Subcommands are the commands a service binary takes besides its flags.
var Subcommands = map[string]bool{"provision": true}

// envInUsage finds the variables a flag's usage names.
var envInUsage = regexp.MustCompile(`\benv (LOWBARENA_[A-Z0-9_]+)`)

// Binaries reads every service binary's flags and environment from its
// app.Component, the same definition its main.go runs: keyed by
// name.
func Binaries() map[string]Binary {
	out := map[string]Binary{}
	for _, c := range []app.Component{gateway.Component(), build.Component(), contract.Component(), quality.Component(),
		efficiency.Component(), score.Component(), round.Component(), runner.Component()} {
		cfg := app.DefaultConfig(c.Name)
		fs := c.FlagSet(&cfg)
		b := Binary{Name: c.Name, Flags: map[string]bool{}, Env: map[string]bool{}, Store: c.Store, User: c.Name, Defaults: map[string]string{}}
		fs.VisitAll(func(f *flag.Flag) {
			b.Flags[f.Name] = true
			b.Defaults[f.Name] = f.DefValue
			for _, m := range envInUsage.FindAllStringSubmatch(f.Usage, -1) {
				b.Env[m[1]] = true
			}
		})
		for _, v := range []string{app.EnvNATSCreds, app.EnvNATSNkey, app.EnvNATSUser, app.EnvNATSPassword,
			app.EnvNATSPasswordFile, app.EnvNATSCA, app.EnvNATSCert, app.EnvNATSKey, app.EnvProvision} {
			b.Env[v] = true
		}
		b.Campaigns = b.Flags["campaigns"]
		if _, ok := access.Lookup(c.Name); !ok {
			b.User = ""
		}
		out[c.Name] = b
	}
	return out
}

// Names lists the binaries' names, sorted.
func Names(bins map[string]Binary) []string {
	names := make([]string, 0, len(bins))
	for n := range bins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
