package check

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/lowbarena/lowbarena/platform/app"
)

// Codes of the metrics checks.
const (
	// CodeMetrics: a service serves no metrics where Prometheus can
	// reach them (no address, a loopback one), or its pod does not say
	// where (the metrics containerPort, the prometheus.io annotations,
	// the probes).
	CodeMetrics = "deploy_metrics"
	// CodeScrapeTargets: Prometheus's scrape targets are not exactly the
	// compose services that serve metrics, on their ports.
	CodeScrapeTargets = "deploy_scrape_targets"
)

// metricsAddr is the service's metrics address (--metrics-addr or
// LOWBARENA_METRICS_ADDR), and whether it sets one.
func (c Container) metricsAddr() (string, bool) {
	v, ok := c.setting("metrics-addr", app.EnvMetricsAddr)
	return v, ok && v != ""
}

// checkMetrics requires the container to serve its metrics on every
// interface at a fixed port (another container or pod scrapes them) and
// returns the port; 0 after a problem.
func (c Container) checkMetrics(ps *Problems) int {
	addr, ok := c.metricsAddr()
	if !ok {
		ps.add(CodeMetrics, c.Where, "%s serves no /metrics: set %s to 0.0.0.0:PORT, and have Prometheus scrape that port", c.Binary.Name, app.EnvMetricsAddr)
		return 0
	}
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	switch {
	case err != nil || perr != nil || port <= 0 || port > 65535:
		ps.add(CodeMetrics, c.Where, "metrics address %q is not host:port with a fixed port (e.g. 0.0.0.0:9464)", addr)
		return 0
	case host != "" && host != "0.0.0.0" && host != "::":
		ps.add(CodeMetrics, c.Where, "metrics address %q listens on %s only: Prometheus, in another container, cannot reach it; use 0.0.0.0:%d", addr, host, port)
		return 0
	}
	return port
}

// servesMetrics says whether the container is a service (not a one-shot
// subcommand such as provision), which must serve metrics.
func (c Container) servesMetrics() bool {
	return len(c.Args) == 0 || !Subcommands[c.Args[0]]
}

// PrometheusConfig is the part of a Prometheus configuration the
// arena's compose deployment uses: static targets per job. It is decoded
// strictly, so a misspelt key (static_config) is an error rather than a
// job that scrapes nothing.
type PrometheusConfig struct {
	Global        map[string]string `json:"global,omitempty"`
	ScrapeConfigs []ScrapeConfig    `json:"scrape_configs"`
}

// ScrapeConfig is one scrape job.
type ScrapeConfig struct {
	JobName        string         `json:"job_name"`
	MetricsPath    string         `json:"metrics_path,omitempty"`
	ScrapeInterval string         `json:"scrape_interval,omitempty"`
	StaticConfigs  []StaticConfig `json:"static_configs"`
}

// StaticConfig is a list of targets with their labels.
type StaticConfig struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// LoadPrometheus reads a Prometheus configuration (see PrometheusConfig).
func LoadPrometheus(file string) (*PrometheusConfig, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	var c PrometheusConfig
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		return nil, fmt.Errorf("check: %s: %w", file, err)
	}
	return &c, nil
}

// PrometheusFile is where the compose deployment's Prometheus
// configuration lives, relative to the repository.
const PrometheusFile = "deploy/prometheus/prometheus.yml"

// The folders of observability/grafana the grafana service mounts: its
// provisioning (data sources, the dashboards' provider) and the
// dashboards the provider reads.
const (
	GrafanaProvisioning = "observability/grafana/provisioning"
	GrafanaDashboards   = "observability/grafana/dashboards"
)

// metricsPorts are the compose services of service binaries that serve
// metrics, with their ports (0 for one whose address is wrong: Compose
// reports it).
func metricsPorts(p *types.Project, bins map[string]Binary) map[string]int {
	out := map[string]int{}
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if s.Build == nil {
			continue
		}
		c, _ := composeContainer(name, s, bins)
		if c == nil || !c.servesMetrics() {
			continue
		}
		if _, ok := c.metricsAddr(); ok {
			var ignored Problems
			out[name] = c.checkMetrics(&ignored)
		}
	}
	return out
}

// ScrapeTargets holds Prometheus's configuration to the compose file:
// its targets are exactly the compose services that serve metrics, each
// once, host the service's name and port its metrics address's, on
// /metrics; and a compose service runs Prometheus with this file and
// Grafana with observability/grafana mounted.
func ScrapeTargets(p *types.Project, bins map[string]Binary, prom *PrometheusConfig) Problems {
	var ps Problems
	where := PrometheusFile
	want := metricsPorts(p, bins)
	seen := map[string]string{}
	for _, sc := range prom.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != app.PathMetrics {
			ps.add(CodeScrapeTargets, where+": "+sc.JobName, "metrics_path %s: the services serve %s", sc.MetricsPath, app.PathMetrics)
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, p, err := net.SplitHostPort(target)
				port, _ := strconv.Atoi(p)
				wantPort, ok := want[host]
				switch {
				case err != nil:
					ps.add(CodeScrapeTargets, where+": "+sc.JobName, "target %q is not host:port", target)
				case !ok:
					ps.add(CodeScrapeTargets, where+": "+sc.JobName, "target %s is no compose service that serves metrics (those: %s)", target, strings.Join(sortedKeys(want), ", "))
				case port != wantPort:
					ps.add(CodeScrapeTargets, where+": "+sc.JobName, "target %s: %s serves its metrics on port %d (%s)", target, host, wantPort, app.EnvMetricsAddr)
				case seen[host] != "":
					ps.add(CodeScrapeTargets, where+": "+sc.JobName, "%s is scraped twice (%s and %s): its series would be counted twice", host, seen[host], target)
				}
				if seen[host] == "" {
					seen[host] = target
				}
			}
		}
	}
	for _, name := range sortedKeys(want) {
		if seen[name] == "" {
			ps.add(CodeScrapeTargets, where, "%s serves metrics on port %d but nothing scrapes it: add the target %s:%d", name, want[name], name, want[name])
		}
	}
	if !mounts(p, PrometheusFile, "") {
		ps.add(CodeMissingVolume, "docker-compose.yml", "no service runs Prometheus with %s: mount it at the prometheus service's --config.file", PrometheusFile)
	}
	for _, dir := range []string{GrafanaProvisioning, GrafanaDashboards} {
		if !mounts(p, dir, "grafana") {
			ps.add(CodeMissingVolume, "docker-compose.yml: grafana", "does not mount %s: Grafana would start without the arena's data source and dashboards", dir)
		}
	}
	return ps
}

// mounts says whether a compose service (service, or any when "") binds
// the repository's path.
func mounts(p *types.Project, path, service string) bool {
	for _, name := range p.ServiceNames() {
		if service != "" && name != service {
			continue
		}
		for _, v := range p.Services[name].Volumes {
			if v.Type == types.VolumeTypeBind && (v.Source == filepath.Join(p.WorkingDir, path) || strings.HasSuffix(v.Source, "/"+path)) {
				return true
			}
		}
	}
	return false
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Annotations Prometheus's Kubernetes discovery reads on a pod (the
// convention of the community's scrape configurations).
const (
	AnnotationScrape = "prometheus.io/scrape"
	AnnotationPort   = "prometheus.io/port"
	AnnotationPath   = "prometheus.io/path"
)

// checkPodMetrics holds a service's pod to its metrics address (port): a
// containerPort named metrics on it, the prometheus.io annotations
// naming it, a liveness probe on /healthz and a readiness probe on
// /readyz at it.
func checkPodMetrics(ps *Problems, where string, pod corev1.PodTemplateSpec, ct corev1.Container, port int) {
	named := false
	for _, p := range ct.Ports {
		if p.Name == "metrics" {
			named = true
			if int(p.ContainerPort) != port {
				ps.add(CodeMetrics, where, "containerPort metrics is %d but the service serves its metrics on %d", p.ContainerPort, port)
			}
		}
	}
	if !named {
		ps.add(CodeMetrics, where, "no containerPort named metrics: add {name: metrics, containerPort: %d}", port)
	}
	for k, want := range map[string]string{AnnotationScrape: "true", AnnotationPort: strconv.Itoa(port), AnnotationPath: app.PathMetrics} {
		if got := pod.Annotations[k]; got != want {
			ps.add(CodeMetrics, where, "pod annotation %s is %q, want %q: Prometheus would not find the metrics", k, got, want)
		}
	}
	for _, pr := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{{"livenessProbe", ct.LivenessProbe, app.PathHealthz}, {"readinessProbe", ct.ReadinessProbe, app.PathReadyz}} {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			ps.add(CodeMetrics, where, "no %s: probe GET %s on the metrics port", pr.kind, pr.path)
			continue
		}
		g := pr.probe.HTTPGet
		portOK := (g.Port.Type == intstr.String && g.Port.StrVal == "metrics" && named) || (g.Port.Type == intstr.Int && int(g.Port.IntVal) == port)
		if g.Path != pr.path || !portOK {
			ps.add(CodeMetrics, where, "%s GETs %s on port %s, want %s on the metrics port (%d)", pr.kind, g.Path, g.Port.String(), pr.path, port)
		}
	}
}
