package check

import (
	"context"
	"fmt"
	"path/filepath"
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
// from deploy/Dockerfile (SERVICE=<name>) or deploy/Dockerfile.runner is
// the container of its binary (Container.Check), with its own user's env
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
	case "Dockerfile.runner":
		return "runner"
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
