package check

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeployment holds the repository's docker-compose.yml, Kubernetes
// manifests and NATS Helm values to the binaries: no problem.
func TestDeployment(t *testing.T) {
	bins := Binaries()
	require.Len(t, bins, 8, "the eight service binaries")
	require.True(t, bins["runner"].Flags["ack-wait"], "flags are read from the components")
	require.True(t, bins["contract"].Env["LOWBARENA_CAMPAIGNS"], "variables are read from the flags' usage")
	require.False(t, bins["runner"].Env["LOWBARENA_CAMPAIGNS"])

	p, err := LoadCompose(context.Background(), "../../docker-compose.yml")
	require.NoError(t, err)
	require.Empty(t, Compose(p, bins).String(), "docker-compose.yml")
	require.Empty(t, ComposeState(p).String(), "docker-compose.yml's state")
	prom, err := LoadPrometheus("../../" + PrometheusFile)
	require.NoError(t, err)
	require.Empty(t, ScrapeTargets(p, bins, prom).String(), PrometheusFile)
	require.Equal(t, map[string]int{"gateway": 9464, "build": 9465, "contract": 9466, "quality": 9467, "efficiency": 9468,
		"score": 9469, "round": 9470, "runner": 9471}, metricsPorts(p, bins), "every service binary's container serves metrics; provision does not")

	objs, ps, err := DecodeManifests("../kubernetes")
	require.NoError(t, err)
	require.Empty(t, ps.String(), "strict decoding")
	require.Empty(t, Kubernetes(objs, bins).String(), "deploy/kubernetes")

	raw, err := os.ReadFile("../kubernetes/nats-values.yaml")
	require.NoError(t, err)
	ps, err = NATSValues(raw)
	require.NoError(t, err)
	require.Empty(t, ps.String(), "nats-values.yaml")

	store, err := HelmStore(raw)
	require.NoError(t, err)
	require.Equal(t, int64(190)<<30, store, "fileStore.maxSize")
	ps, err = KubernetesJetStream(objs, store)
	require.NoError(t, err)
	require.Empty(t, ps.String(), "the provision Job's limits against the NATS nodes' store")
	conf, err := os.ReadFile("../nats/cluster.conf")
	require.NoError(t, err)
	store, err = NATSStore(conf)
	require.NoError(t, err)
	require.Equal(t, int64(20)<<30, store, "cluster.conf's max_file_store")
	ps, err = ComposeJetStream(p, store)
	require.NoError(t, err)
	require.Empty(t, ps.String(), "compose's provision against cluster.conf")
}

// edit returns file's text with old replaced by new, once; it fails when
// old is not there once, so that a case cannot silently stop testing.
func edit(t *testing.T, file, old, new string) []byte {
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(raw), old), "%s holds %q once", file, old)
	return []byte(strings.Replace(string(raw), old, new, 1))
}

// editedManifests copies deploy/kubernetes into a temporary folder with
// file's text edited (old replaced by new, once) and returns the folder.
func editedManifests(t *testing.T, file, old, new string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../kubernetes/*.yaml")
	require.NoError(t, err)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		if filepath.Base(f) == file {
			raw = edit(t, f, old, new)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), raw, 0o644))
	}
	return dir
}

// TestComposeRefuses: a compose file that drifted from the binaries is
// refused with the problem's code.
func TestComposeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		// code lists the codes wanted, space-separated.
		code    string
		loadErr string
	}{
		{"a variable no binary reads", "      LOWBARENA_BUILD_WORK: /work", "      LOWBARENA_BUILD_WORK: /work\n      LOWBARENA_BULID_WORK: /work", CodeUnknownEnv, ""},
		{"a flag the binary has not", `command: ["provision"]`, `command: ["provision", "--replica", "3"]`, CodeUnknownFlag, ""},
		{"another service's credentials", "env_file: [deploy/secrets/score.env]", "env_file: [deploy/secrets/round.env]", CodeWrongCredentials, ""},
		{"a service that names no binary", "args: {SERVICE: score}", "args: {SERVICE: scoring}", CodeUnknownBinary + " " + CodeMissingService, ""},
		{"a campaigns folder on no volume", "      LOWBARENA_METRICS_ADDR: 0.0.0.0:9466\n", "      LOWBARENA_METRICS_ADDR: 0.0.0.0:9466\n      LOWBARENA_CAMPAIGNS: /elsewhere\n", CodeMissingVolume, ""},
		{"a grader without its sandbox", "dockerfile: deploy/Dockerfile.grader}\n    security_opt: [seccomp=unconfined, apparmor=unconfined, systempaths=unconfined]\n", "dockerfile: deploy/Dockerfile.grader}\n", CodeGraderSandbox, ""},
		{"an arena verb that does not exist", `command: ["campaign", "push", "/campaigns"]`, `command: ["campaigns", "push", "/campaigns"]`, CodeUnknownFlag, ""},
		{"an unknown field", "    ulimits:", "    ulimit:", "", "ulimit"},
		{"a service without metrics", "      LOWBARENA_METRICS_ADDR: 0.0.0.0:9469\n", "", CodeMetrics, ""},
		{"metrics on loopback only", "LOWBARENA_METRICS_ADDR: 0.0.0.0:9470", "LOWBARENA_METRICS_ADDR: 127.0.0.1:9470", CodeMetrics, ""},
		{"metrics on no fixed port", "LOWBARENA_METRICS_ADDR: 0.0.0.0:9465", "LOWBARENA_METRICS_ADDR: 0.0.0.0:0", CodeMetrics, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "docker-compose.yml")
			require.NoError(t, os.WriteFile(file, edit(t, "../../docker-compose.yml", tc.old, tc.new), 0o644))
			p, err := LoadCompose(context.Background(), file)
			if tc.loadErr != "" {
				require.ErrorContains(t, err, tc.loadErr)
				return
			}
			require.NoError(t, err)
			ps := Compose(p, Binaries())
			require.ElementsMatch(t, strings.Fields(tc.code), ps.Codes(), ps.String())
		})
	}
}

// TestScrapeTargetsRefuse: Prometheus's targets that drifted from the
// compose services' metrics addresses (either file edited), or a compose
// file that runs no Prometheus or a Grafana without the arena's
// provisioning, are refused.
func TestScrapeTargetsRefuse(t *testing.T) {
	const compose, prom = "docker-compose.yml", "prometheus.yml"
	for _, tc := range []struct {
		name, file, old, new string
		// code lists the codes wanted, space-separated.
		code string
	}{
		{"a target on the wrong port", prom, `"score:9469"`, `"score:9464"`, CodeScrapeTargets},
		{"a service not scraped", prom, "      - targets: [\"round:9470\"]\n        labels: {service: round}\n", "", CodeScrapeTargets},
		{"a target that is no service", prom, `"runner:9471"`, `"runner:9471", "runner-2:9471"`, CodeScrapeTargets},
		{"a service scraped twice", prom, `"build:9465"`, `"build:9465", "build:9465"`, CodeScrapeTargets},
		{"another metrics path", prom, "    metrics_path: /metrics", "    metrics_path: /prometheus", CodeScrapeTargets},
		{"a service moved to another port", compose, "LOWBARENA_METRICS_ADDR: 0.0.0.0:9467", "LOWBARENA_METRICS_ADDR: 0.0.0.0:9567", CodeScrapeTargets},
		{"a service that stopped serving metrics", compose, "      LOWBARENA_METRICS_ADDR: 0.0.0.0:9468\n", "", CodeScrapeTargets},
		{"prometheus without the file", compose, "      - ./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro\n", "", CodeMissingVolume},
		{"grafana without the dashboards", compose, "      - ./observability/grafana/dashboards:/var/lib/grafana/dashboards/lowbarena:ro\n", "", CodeMissingVolume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range map[string]string{compose: "../../docker-compose.yml", prom: "../prometheus/prometheus.yml"} {
				raw, err := os.ReadFile(src)
				require.NoError(t, err)
				if name == tc.file {
					raw = edit(t, src, tc.old, tc.new)
				}
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), raw, 0o644))
			}
			p, err := LoadCompose(context.Background(), filepath.Join(dir, compose))
			require.NoError(t, err)
			pc, err := LoadPrometheus(filepath.Join(dir, prom))
			require.NoError(t, err)
			ps := ScrapeTargets(p, Binaries(), pc)
			require.ElementsMatch(t, strings.Fields(tc.code), ps.Codes(), ps.String())
		})
	}
}

// TestLoadPrometheusIsStrict: a misspelt key is an error, not a job that
// scrapes nothing.
func TestLoadPrometheusIsStrict(t *testing.T) {
	file := filepath.Join(t.TempDir(), "prometheus.yml")
	require.NoError(t, os.WriteFile(file, edit(t, "../prometheus/prometheus.yml", "    static_configs:", "    static_config:"), 0o644))
	_, err := LoadPrometheus(file)
	require.ErrorContains(t, err, "static_config")
}

// TestKubernetesRefuses: a manifest that drifted from the binaries, or
// that the API types do not hold, is refused with the problem's code.
func TestKubernetesRefuses(t *testing.T) {
	for _, tc := range []struct {
		// code lists the codes wanted, space-separated: the problem
		// made and what follows from it.
		name, file, old, new, code string
	}{
		{"an unknown field", "runner.yaml", "          resources:\n", "          resource:\n", CodeUnknownField + " " + CodeMissingService},
		{"a field twice", "clickhouse.yaml", "  serviceName: clickhouse\n", "  serviceName: clickhouse\n  serviceName: ch\n", CodeUnknownField},
		{"an unknown kind", "namespace.yaml", "kind: Namespace", "kind: Namespaces", CodeUnknownKind},
		{"no GPU for the runner", "runner.yaml", "              nvidia.com/gpu: 1\n", "              cpu: 1\n", CodeNoGPU},
		{"a variable the runner does not read", "runner.yaml", "            - {name: LOWBARENA_RUNNER_WORK, value: /work}\n",
			"            - {name: LOWBARENA_RUNNER_WORK, value: /work}\n            - {name: LOWBARENA_CAMPAIGNS, value: /campaigns}\n", CodeUnknownEnv},
		{"a flag the runner has not", "runner.yaml", "args: [--ack-wait, 30s,", "args: [--ackwait, 30s,", CodeUnknownFlag},
		{"the operator's seed in a service", "services.yaml", "secretRef: {name: lowbarena-nkey-score}", "secretRef: {name: lowbarena-nkey-operator}", CodeWrongCredentials},
		{"a selector that owns no pod", "runner.yaml", "    matchLabels: {app: runner}", "    matchLabels: {app: runners}", CodeSelector},
		{"the work folder on no volume", "runner.yaml", "            - {name: work, mountPath: /work}\n", "", CodeMissingVolume},
		{"R1 streams on a cluster", "services.yaml", `LOWBARENA_REPLICAS: "3"`, `LOWBARENA_REPLICAS: "1"`, CodeMissingEnv},
		{"no metrics address", "services.yaml", "  LOWBARENA_METRICS_ADDR: 0.0.0.0:9464\n", "", CodeMetrics},
		{"metrics on loopback", "services.yaml", "  LOWBARENA_METRICS_ADDR: 0.0.0.0:9464\n", "  LOWBARENA_METRICS_ADDR: 127.0.0.1:9464\n", CodeMetrics},
		{"no metrics containerPort", "runner.yaml", "            - {name: metrics, containerPort: 9464}\n", "", CodeMetrics},
		{"a metrics containerPort on another port", "runner.yaml", "{name: metrics, containerPort: 9464}", "{name: metrics, containerPort: 9465}", CodeMetrics},
		{"a scrape annotation on another port", "runner.yaml", `prometheus.io/port: "9464"`, `prometheus.io/port: "9090"`, CodeMetrics},
		{"no scrape annotation", "runner.yaml", "        prometheus.io/scrape: \"true\"\n", "", CodeMetrics},
		{"readiness probed on /healthz", "runner.yaml", "httpGet: {path: /readyz, port: metrics}", "httpGet: {path: /healthz, port: metrics}", CodeMetrics},
		{"no liveness probe", "runner.yaml", "          livenessProbe:\n            httpGet: {path: /healthz, port: metrics}\n            periodSeconds: 10\n", "", CodeMetrics},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, ps, err := DecodeManifests(editedManifests(t, tc.file, tc.old, tc.new))
			require.NoError(t, err)
			ps = append(ps, Kubernetes(objs, Binaries())...)
			require.ElementsMatch(t, strings.Fields(tc.code), ps.Codes(), "only the problem made, and what follows from it: %s", ps.String())
		})
	}
}

// TestNATSValuesRefuses: Helm values that would not make the arena's
// cluster are refused.
func TestNATSValuesRefuses(t *testing.T) {
	for _, tc := range []struct{ name, old, new string }{
		{"one node", "    replicas: 3", "    replicas: 1"},
		{"no JetStream", "  jetstream:\n    enabled: true", "  jetstream:\n    enabled: false"},
		{"a user's key missing", "    LOWBARENA_NKEY_ROUND:", "    LOWBARENA_NKEY_RUND:"},
		{"no auth.conf", "    $include: ../lowbarena-auth/auth.conf\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := NATSValues(edit(t, "../kubernetes/nats-values.yaml", tc.old, tc.new))
			require.NoError(t, err)
			require.Equal(t, []string{CodeNATS}, ps.Codes())
		})
	}
}

// TestClusterRefuses: each class of mistake that would keep the arena
// from starting on a GPU node, or lose its state, is refused with its
// code, and only with it (and what follows from it).
func TestClusterRefuses(t *testing.T) {
	for _, tc := range []struct {
		// code lists the codes wanted, space-separated.
		name, file, old, new, code string
	}{
		{"a user namespace beside a GPU", "runner.yaml", "      shareProcessNamespace: true\n", "      shareProcessNamespace: true\n      hostUsers: false\n", CodeGPUUserNamespace},
		{"a GPU runner without /dev/shm", "runner.yaml", "            - {name: dshm, mountPath: /dev/shm}\n", "", CodeGPUShm},
		{"/dev/shm on disk", "runner.yaml", "emptyDir: {medium: Memory, sizeLimit: 16Gi}", "emptyDir: {sizeLimit: 16Gi}", CodeGPUShm},
		{"a GPU runner without the toleration", "runner.yaml", "        - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n", "        - {key: dedicated, operator: Exists, effect: NoSchedule}\n", CodeGPUToleration},
		{"a GPU runner without requests", "runner.yaml", "            requests:\n              cpu: \"8\"\n              memory: 64Gi\n", "", CodeGPURequests},
		{"a GPU runner without a memory request", "runner.yaml", "              memory: 64Gi\n", "", CodeGPURequests},
		{"a surge rollout on GPUs", "runner.yaml", "    type: Recreate\n", "    type: RollingUpdate\n", CodeGPUSurge},
		{"a surge of one on GPUs", "runner.yaml", "    type: Recreate\n", "    type: RollingUpdate\n    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}\n", CodeGPUSurge},
		{"a grace shorter than the engine's stop", "runner.yaml", "terminationGracePeriodSeconds: 90", "terminationGracePeriodSeconds: 30", CodeGPUGrace},
		{"a work folder without a size limit", "runner.yaml", "emptyDir: {sizeLimit: 300Gi}", "emptyDir: {}", CodeUnboundedVolume},
		{"the grader without its user namespace", "services.yaml", "      hostUsers: false\n", "", CodeGraderSandbox},
		{"the grader with a masked /proc", "services.yaml", "            procMount: Unmasked\n", "", CodeGraderSandbox},
		{"the store's password in a ConfigMap", "services.yaml", "  LOWBARENA_REPLICAS: \"3\"\n", "  LOWBARENA_REPLICAS: \"3\"\n  LOWBARENA_STORE: clickhouse://lowbarena:hunter2@clickhouse:9000/lowbarena\n", CodeSecretInConfigMap},
		{"a pod no PodMonitor scrapes", "services.yaml", "      labels: {app: score, lowbarena.dev/metrics: \"true\"}", "      labels: {app: score}", CodeMetrics},
		{"an arena verb that does not exist", "provision.yaml", "args: [campaign, push, /campaigns/campaigns]", "args: [campaigns, push, /campaigns/campaigns]", CodeUnknownFlag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, ps, err := DecodeManifests(editedManifests(t, tc.file, tc.old, tc.new))
			require.NoError(t, err)
			ps = append(ps, Kubernetes(objs, Binaries())...)
			require.ElementsMatch(t, strings.Fields(tc.code), ps.Codes(), "only the problem made, and what follows from it: %s", ps.String())
		})
	}
}

// TestUnfilledVolume: a ReadOnlyMany claim with no data source (what the
// campaigns once were) is refused; one filled from a snapshot, or a
// ReadWriteMany one, is not.
func TestUnfilledVolume(t *testing.T) {
	const claim = `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: lowbarena-campaigns, namespace: lowbarena}
spec:
  accessModes: [%s]
  resources: {requests: {storage: 1Gi}}
%s`
	for _, tc := range []struct {
		name, modes, extra string
		refused            bool
	}{
		{"read-only many, nothing fills it", "ReadOnlyMany", "", true},
		{"read-only many from a snapshot", "ReadOnlyMany", "  dataSource: {name: campaigns-v3, kind: VolumeSnapshot, apiGroup: snapshot.storage.k8s.io}\n", false},
		{"read-write many", "ReadWriteMany", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, ps, err := DecodeManifest("campaigns.yaml", []byte(fmt.Sprintf(claim, tc.modes, tc.extra)))
			require.NoError(t, err)
			require.Empty(t, ps.String())
			ps = Kubernetes(objs, map[string]Binary{})
			require.Equal(t, tc.refused, slices.Contains(ps.Codes(), CodeUnfilledVolume), ps.String())
		})
	}
}

// TestComposeStateRefuses: compose state that `docker compose down`
// would lose, services that start before their stores are healthy, and
// a runner without an init are refused with their codes.
func TestComposeStateRefuses(t *testing.T) {
	for _, tc := range []struct{ name, old, new, code string }{
		{"NATS's JetStream in the container", "      - nats-2-data:/data\n", "", CodeComposeVolume},
		{"NATS's JetStream on an anonymous volume", "      - nats-3-data:/data\n", "      - /data\n", CodeComposeVolume},
		{"ClickHouse's tables in the container", "      - clickhouse-data:/var/lib/clickhouse\n", "", CodeComposeVolume},
		{"ClickHouse without a health check", "    healthcheck:\n      test: [\"CMD\", \"wget\", \"-q\", \"-O\", \"/dev/null\", \"http://127.0.0.1:8123/ping\"]\n      interval: 5s\n      timeout: 3s\n      retries: 30\n", "", CodeComposeHealth},
		{"a service that waits for a start only", "    ports: [\"8080:8080\"]\n    expose: [\"9464\"]\n    depends_on:\n      nats-1: {condition: service_healthy}",
			"    ports: [\"8080:8080\"]\n    expose: [\"9464\"]\n    depends_on:\n      nats-1: {condition: service_started}", CodeComposeHealth},
		{"a runner without an init", "    init: true\n", "", CodeComposeInit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "docker-compose.yml")
			require.NoError(t, os.WriteFile(file, edit(t, "../../docker-compose.yml", tc.old, tc.new), 0o644))
			p, err := LoadCompose(context.Background(), file)
			require.NoError(t, err)
			ps := ComposeState(p)
			require.Equal(t, []string{tc.code}, ps.Codes(), ps.String())
		})
	}
}

// TestJetStreamRefuses: limits that do not fit a NATS node's store, or
// nodes that set none, are refused with deploy_jetstream_unbounded.
func TestJetStreamRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new string
	}{
		{"a volume larger than the nodes' store", "services.yaml", "LOWBARENA_JS_VOLUME: 190GiB", "LOWBARENA_JS_VOLUME: 250GiB"},
		{"limits past their own volume", "services.yaml", "  LOWBARENA_JS_VOLUME: 190GiB\n", "  LOWBARENA_JS_VOLUME: 190GiB\n  LOWBARENA_JS_ARTIFACTS_MAX_BYTES: 180GiB\n"},
		{"the default volume on a smaller store", "nats-values.yaml", "      maxSize: 190Gi\n", "      maxSize: 10Gi\n"},
		{"a size that is no size", "services.yaml", "LOWBARENA_JS_VOLUME: 190GiB", "LOWBARENA_JS_VOLUME: lots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := editedManifests(t, tc.file, tc.old, tc.new)
			raw, err := os.ReadFile(filepath.Join(dir, "nats-values.yaml"))
			require.NoError(t, err)
			objs, _, err := DecodeManifests(dir)
			require.NoError(t, err)
			store, err := HelmStore(raw)
			require.NoError(t, err)
			ps, err := KubernetesJetStream(objs, store)
			require.NoError(t, err)
			require.Equal(t, []string{CodeJetStream}, ps.Codes(), ps.String())
		})
	}
	t.Run("compose nodes without max_file_store", func(t *testing.T) {
		conf, err := os.ReadFile("../nats/cluster.conf")
		require.NoError(t, err)
		store, err := NATSStore([]byte(strings.Replace(string(conf), "  max_file_store: 20GB\n", "", 1)))
		require.NoError(t, err)
		require.Zero(t, store)
		p, err := LoadCompose(context.Background(), "../../docker-compose.yml")
		require.NoError(t, err)
		ps, err := ComposeJetStream(p, store)
		require.NoError(t, err)
		require.Equal(t, []string{CodeJetStream}, ps.Codes(), ps.String())
	})
}
