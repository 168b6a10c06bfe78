package check

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// LoadCompose reads a compose file as Docker Compose does (compose-go:
// the Compose Specification's schema, which refuses unknown fields,
// interpolation, extensions and merges), without reading the env files
// it names: those are the credentials `arena credentials` writes, not
// in the repository. ${VAR:-default} takes its default.
func LoadCompose(ctx context.Context, file string) (*types.Project, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	p, err := loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("lowbarena", true)
		o.SkipResolveEnvironment = true
	})
	if err != nil {
		return nil, fmt.Errorf("check: %s: %w", file, err)
	}
	return p, nil
}

// Compose holds a compose project to the binaries: every service built
// from deploy/Dockerfile (SERVICE=<name>), deploy/Dockerfile.grader (the
// quality stage) or deploy/Dockerfile.runner[-vllm|-sglang] is the
// container of its binary, one built from deploy/Dockerfile.arena runs an
// arena verb (Container.Check), with its own user's env
// file (deploy/secrets/<user>.env), started after provision completed and
// after ClickHouse when it keeps rows; every binary has a service.
func Compose(p *types.Project, bins map[string]Binary) Problems {
	var ps Problems
	seen := map[string]bool{}
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		where := "docker-compose.yml: " + name
		if s.Build == nil {
			continue // nats, clickhouse: images of their own
		}
		if binaryOf(s) == CLI {
			checkCLI(&ps, where, s.Command)
			continue
		}
		c, users := composeContainer(name, s, bins)
		if c == nil {
			ps.add(CodeUnknownBinary, where, "built from %s with SERVICE=%q, which is no service binary (services/<name>/cmd/<name>)", s.Build.Dockerfile, binaryOf(s))
			continue
		}
		b := c.Binary
		seen[b.Name] = true
		if users > 1 {
			ps.add(CodeWrongCredentials, where, "two users' env files: give one")
		}
		c.Check(&ps)
		if b.Name == "quality" && !slices.Contains(s.SecurityOpt, "seccomp=unconfined") {
			ps.add(CodeGraderSandbox, where, "the quality stage grades code under bubblewrap: give it security_opt seccomp=unconfined, apparmor=unconfined, systempaths=unconfined")
		}
		if c.servesMetrics() {
			c.checkMetrics(&ps)
		}
		if len(c.Args) > 0 && c.Args[0] == "provision" {
			continue
		}
		if d, ok := s.DependsOn["provision"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			ps.add(CodeMissingEnv, where, "starts before the streams exist: depend on provision with condition service_completed_successfully")
		}
		if _, ok := s.DependsOn["clickhouse"]; b.Store && !ok {
			ps.add(CodeMissingEnv, where, "%s keeps rows: depend on clickhouse", b.Name)
		}
	}
	for _, n := range Names(bins) {
		if !seen[n] {
			ps.add(CodeMissingService, "docker-compose.yml", "no service runs %s: add one built from deploy/Dockerfile with SERVICE=%s", n, n)
		}
	}
	return ps
}

// binaryOf is the service binary a compose service is built as:
// deploy/Dockerfile's SERVICE, or the runner's Dockerfile.
func binaryOf(s types.ServiceConfig) string {
	switch filepath.Base(s.Build.Dockerfile) {
	case "Dockerfile":
		if v := s.Build.Args["SERVICE"]; v != nil {
			return *v
		}
	case "Dockerfile.runner", "Dockerfile.runner-vllm", "Dockerfile.runner-sglang":
		return "runner"
	case "Dockerfile.grader":
		return "quality"
	case "Dockerfile.arena":
		return CLI
	}
	return ""
}

// composeContainer is the container of a compose service built from the
// repository (s.Build set): its binary, command, environment, NATS user
// (from deploy/secrets/<user>.env, the last one; users counts them) and
// mounts; nil when it is built as no service binary.
func composeContainer(name string, s types.ServiceConfig, bins map[string]Binary) (_ *Container, users int) {
	b, ok := bins[binaryOf(s)]
	if !ok {
		return nil, 0
	}
	c := &Container{Where: "docker-compose.yml: " + name, Binary: b, Args: s.Command, Env: map[string]string{}}
	for k, v := range s.Environment {
		c.Env[k] = ""
		if v != nil {
			c.Env[k] = *v
		}
	}
	for _, f := range s.EnvFiles {
		base := filepath.Base(f.Path)
		if filepath.Base(filepath.Dir(f.Path)) == "secrets" && strings.HasSuffix(base, ".env") && base != "nats.env" {
			users++
			c.User = strings.TrimSuffix(base, ".env")
		}
	}
	for _, v := range s.Volumes {
		c.Mounts = append(c.Mounts, v.Target)
	}
	return c, users
}

// stateDirs are where the images a compose file runs keep their state:
// NATS's JetStream store (deploy/nats/cluster.conf's store_dir) and
// ClickHouse's data path, by image name.
var stateDirs = map[string]string{"nats": "/data/jetstream", "clickhouse/clickhouse-server": "/var/lib/clickhouse"}

// ComposeState holds a compose project's state to what survives `docker
// compose down`: NATS's and ClickHouse's data on named volumes (or binds),
// never in a container's own layer or an anonymous volume; the services
// wait for them to be healthy, and they have health checks; the runner
// has an init that reaps its engines' orphans.
func ComposeState(p *types.Project) Problems {
	var ps Problems
	healthy := map[string]bool{}
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		where := "docker-compose.yml: " + name
		image := strings.SplitN(s.Image, ":", 2)[0]
		dir, stateful := stateDirs[image]
		if !stateful {
			continue
		}
		kept := false
		for _, v := range s.Volumes {
			named := (v.Type == types.VolumeTypeVolume && v.Source != "") || v.Type == types.VolumeTypeBind
			if named && (dir == v.Target || strings.HasPrefix(dir, strings.TrimSuffix(v.Target, "/")+"/")) {
				kept = true
			}
		}
		if !kept {
			ps.add(CodeComposeVolume, where, "keeps its state in %s, on no named volume: `docker compose down` would lose it (mount a named volume there)", dir)
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0 {
			ps.add(CodeComposeHealth, where, "no health check: the services cannot wait for it to be ready")
			continue
		}
		healthy[name] = true
	}
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if s.Build == nil {
			continue
		}
		where := "docker-compose.yml: " + name
		for dep, d := range s.DependsOn {
			image := strings.SplitN(p.Services[dep].Image, ":", 2)[0]
			if _, stateful := stateDirs[image]; stateful && d.Condition != types.ServiceConditionHealthy {
				ps.add(CodeComposeHealth, where, "waits for %s to have started, not to be healthy: depend on it with condition service_healthy", dep)
			} else if stateful && !healthy[dep] {
				ps.add(CodeComposeHealth, where, "waits for %s to be healthy, which has no health check", dep)
			}
		}
		if binaryOf(s) == "runner" && (s.Init == nil || !*s.Init) {
			ps.add(CodeComposeInit, where, "the runner has no init: set init: true, so that an init process reaps the orphans of its engines")
		}
	}
	return ps
}
