package check

import (
	"path"
	"strings"
)

// Container is one container of a deployment file as the checks see it:
// the binary it runs and how it is configured.
type Container struct {
	// Where names it in problems (file, service or object).
	Where string
	// Binary is the service binary it runs.
	Binary Binary
	// Args are its command's arguments (after the binary).
	Args []string
	// Env are the variables it is given, with their values ("" when the
	// value comes from elsewhere: a field, a secret).
	Env map[string]string
	// User is the NATS user whose seed it is given, "" when none.
	User string
	// Mounts are the folders volumes are mounted at.
	Mounts []string
}

// flagValue returns the value args give flag name (--name v or
// --name=v), and whether they give it.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		f := strings.TrimLeft(a, "-")
		if f == name && strings.HasPrefix(a, "-") && i+1 < len(args) {
			return args[i+1], true
		}
		if strings.HasPrefix(f, name+"=") && strings.HasPrefix(a, "-") {
			return strings.TrimPrefix(f, name+"="), true
		}
	}
	return "", false
}

// setting is what the container sets for flag (a flag wins over its
// variable), and whether it sets it at all.
func (c Container) setting(flag, env string) (string, bool) {
	if v, ok := flagValue(c.Args, flag); ok {
		return v, true
	}
	v, ok := c.Env[env]
	return v, ok
}

// under says whether folder is a mount or inside one.
func (c Container) under(folder string) bool {
	folder = path.Clean(folder)
	for _, m := range c.Mounts {
		m = path.Clean(m)
		if folder == m || strings.HasPrefix(folder, m+"/") {
			return true
		}
	}
	return false
}

// Check holds the container to its binary: every flag and LOWBARENA_
// variable one the binary reads, the settings it needs given (NATS, R3,
// the store, the campaigns on a volume, its work folder on one), its own
// NATS user (the operator's for provision).
func (c Container) Check(ps *Problems) {
	b := c.Binary
	sub := ""
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		if !strings.HasPrefix(a, "-") {
			if i == 0 && Subcommands[a] {
				sub = a
				continue
			}
			ps.add(CodeUnknownFlag, c.Where, "%q is no flag or subcommand of %s (its subcommand: provision, first)", a, b.Name)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !b.Flags[name] {
			ps.add(CodeUnknownFlag, c.Where, "%s has no flag --%s (run %s -h)", b.Name, name, b.Name)
		}
		if !hasValue && i+1 < len(c.Args) && !strings.HasPrefix(c.Args[i+1], "-") {
			i++ // the flag's value
		}
	}
	for k := range c.Env {
		if strings.HasPrefix(k, "LOWBARENA_") && !b.Env[k] {
			ps.add(CodeUnknownEnv, c.Where, "%s does not read %s: remove it, or name the variable its flag reads", b.Name, k)
		}
	}
	if _, ok := c.setting("nats", "LOWBARENA_NATS_URL"); !ok {
		ps.add(CodeMissingEnv, c.Where, "no NATS URL: set LOWBARENA_NATS_URL to the cluster's nodes")
	}
	if v, _ := c.setting("replicas", "LOWBARENA_REPLICAS"); v != "3" {
		ps.add(CodeMissingEnv, c.Where, "LOWBARENA_REPLICAS is %q: a three-node cluster keeps the arena's streams at 3", v)
	}
	if b.Store {
		if v, _ := c.setting("store", "LOWBARENA_STORE"); !strings.HasPrefix(v, "clickhouse://") {
			ps.add(CodeMissingEnv, c.Where, "%s keeps rows: set LOWBARENA_STORE to the ClickHouse server (clickhouse://user:password@host:9000/db), not %q", b.Name, v)
		}
	}
	// The campaigns come from the campaigns bucket unless a local folder
	// replaces it; such a folder must be on a volume.
	if b.Campaigns && sub == "" {
		if v, ok := c.setting("campaigns", "LOWBARENA_CAMPAIGNS"); ok && !c.under(v) {
			ps.add(CodeMissingVolume, c.Where, "the campaigns folder %s is on no volume: mount the campaigns there", v)
		}
	}
	for _, w := range []struct{ flag, env string }{{"work", "LOWBARENA_BUILD_WORK"}, {"work", "LOWBARENA_RUNNER_WORK"}} {
		if !b.Env[w.env] || sub != "" {
			continue
		}
		if v, ok := c.setting(w.flag, w.env); ok && !c.under(v) {
			ps.add(CodeMissingVolume, c.Where, "the work folder %s is on no volume: it would fill the container's own layer", v)
		}
	}
	want := b.User
	if sub == "provision" {
		want = "operator"
	}
	if c.User != want {
		ps.add(CodeWrongCredentials, c.Where, "%s connects as NATS user %q, want %q (its seed in %s's secret)", b.Name, c.User, want, want)
	}
}
