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
		binName := ""
		switch filepath.Base(s.Build.Dockerfile) {
		case "Dockerfile":
			if v := s.Build.Args["SERVICE"]; v != nil {
				binName = *v
			}
		case "Dockerfile.runner":
			binName = "runner"
		}
		b, ok := bins[binName]
		if !ok {
			ps.add(CodeUnknownBinary, where, "built from %s with SERVICE=%q, which is no service binary (services/<name>)", s.Build.Dockerfile, binName)
			continue
		}
		seen[binName] = true
		c := Container{Where: where, Binary: b, Args: s.Command, Env: map[string]string{}}
		for k, v := range s.Environment {
			c.Env[k] = ""
			if v != nil {
				c.Env[k] = *v
			}
		}
		for _, f := range s.EnvFiles {
			base := filepath.Base(f.Path)
			if filepath.Base(filepath.Dir(f.Path)) == "secrets" && strings.HasSuffix(base, ".env") && base != "nats.env" {
				if c.User != "" {
					ps.add(CodeWrongCredentials, where, "two users' env files: give one")
				}
				c.User = strings.TrimSuffix(base, ".env")
			}
		}
		for _, v := range s.Volumes {
			c.Mounts = append(c.Mounts, v.Target)
		}
		c.Check(&ps)
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
