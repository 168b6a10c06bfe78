package check

import (
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lowbarena/lowbarena/platform/app"
)

// Codes of the checks that hold the manifests to what a GPU node, the
// NVIDIA device plugin and container toolkit, and Kubernetes' own
// semantics need (docs/operators/deployment.md says why each matters).
const (
	// CodeGPUUserNamespace: a pod that asks for a GPU sets hostUsers:
	// false. NVIDIA's container toolkit does not support user namespaces
	// (its createContainer hook runs as the remapped user), so the pod
	// never starts.
	CodeGPUUserNamespace = "deploy_gpu_user_namespace"
	// CodeGPUShm: a GPU pod has no memory-backed /dev/shm; PyTorch shares
	// tensors between an engine's processes through it, and a
	// container's default is 64 MiB.
	CodeGPUShm = "deploy_gpu_no_shm"
	// CodeGPUToleration: a GPU pod does not tolerate the nvidia.com/gpu
	// taint that GPU pools carry, so it is never scheduled there.
	CodeGPUToleration = "deploy_gpu_no_toleration"
	// CodeGPURequests: a GPU pod requests no CPU or memory: loading a
	// checkpoint takes tens of GiB of host memory, and a pod without
	// requests is the first one evicted.
	CodeGPURequests = "deploy_gpu_no_requests"
	// CodeGPUSurge: a Deployment of GPU pods rolls out by starting a new
	// pod before it stops an old one, which needs a free GPU; on a full
	// pool the rollout never ends.
	CodeGPUSurge = "deploy_gpu_surge_rollout"
	// CodeGPUGrace: a GPU pod's termination grace is shorter than an
	// engine's stop and the runner's drain, so a rollout kills the job in
	// flight instead of handing it back.
	CodeGPUGrace = "deploy_gpu_grace_short"
	// CodeUnboundedVolume: an emptyDir the arena writes has no size
	// limit, so a large checkpoint fills the node's disk.
	CodeUnboundedVolume = "deploy_unbounded_volume"
	// CodeUnfilledVolume: a ReadOnlyMany claim that nothing fills (no
	// data source): block provisioners cannot create it, and no pod can
	// write it.
	CodeUnfilledVolume = "deploy_rox_unfilled"
	// CodeGraderSandbox: the quality stage, which grades code under
	// bubblewrap, runs without its own user namespace or unmasked /proc.
	CodeGraderSandbox = "deploy_grader_no_sandbox"
	// CodeSecretInConfigMap: a password sits in a ConfigMap, which
	// anything that may read ConfigMaps in the namespace can read.
	CodeSecretInConfigMap = "deploy_secret_in_configmap"
	// CodeComposeVolume: a compose service keeps state (NATS's
	// JetStream, ClickHouse's tables) in its container's own layer, which
	// `docker compose down` removes.
	CodeComposeVolume = "deploy_compose_no_volume"
	// CodeComposeHealth: a compose service waits for NATS or ClickHouse
	// to have started, not to be healthy, or they have no health check.
	CodeComposeHealth = "deploy_compose_health"
	// CodeComposeInit: the runner in compose has no init to reap the
	// orphans of its engines.
	CodeComposeInit = "deploy_compose_no_init"
)

// storeSecret is the Secret that holds the store's URL (with ClickHouse's
// password): a service that keeps rows reads LOWBARENA_STORE from it.
const storeSecret = "lowbarena-store"

// durationSetting is the duration a container sets for a flag of its
// binary, or the binary's own default (read from its flag set) when it
// sets none.
func durationSetting(c Container, flag string) time.Duration {
	v, ok := c.setting(flag, "")
	if !ok {
		v = c.Binary.Defaults[flag]
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0
	}
	return d
}

// gpuLimit says whether a container asks the device plugin for a GPU.
func gpuLimit(ct corev1.Container) bool {
	q, ok := ct.Resources.Limits[gpuResource]
	return ok && q.Cmp(resource.MustParse("1")) >= 0
}

// checkGPUPod holds a pod that asks for a GPU to what the device plugin,
// the container toolkit and the runner's stop need. c is its runner
// container as the checks see it (nil for another GPU container).
func checkGPUPod(ps *Problems, where string, pod corev1.PodSpec, ct corev1.Container, c *Container) {
	if pod.HostUsers != nil && !*pod.HostUsers {
		ps.add(CodeGPUUserNamespace, where, "hostUsers: false on a GPU pod: NVIDIA's container toolkit does not support user namespaces and the pod would not start; run code grading in a pod of its own (the quality stage)")
	}
	shm := ""
	for _, m := range ct.VolumeMounts {
		if m.MountPath == "/dev/shm" {
			shm = m.Name
		}
	}
	memShm := false
	for _, v := range pod.Volumes {
		if v.Name == shm && v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory {
			memShm = true
		}
	}
	if !memShm {
		ps.add(CodeGPUShm, where, "no memory-backed /dev/shm: mount an emptyDir {medium: Memory, sizeLimit: 16Gi} at /dev/shm (a container's default is 64 MiB, and an engine's processes share tensors through it)")
	}
	tolerates := false
	for _, t := range pod.Tolerations {
		if (t.Key == string(gpuResource) && (t.Operator == corev1.TolerationOpExists || t.Operator == "")) || (t.Key == "" && t.Operator == corev1.TolerationOpExists) {
			tolerates = true
		}
	}
	if !tolerates {
		ps.add(CodeGPUToleration, where, "no toleration of the %s taint: add {key: %s, operator: Exists, effect: NoSchedule}, or the pod never lands on a tainted GPU pool", gpuResource, gpuResource)
	}
	req := ct.Resources.Requests
	if _, ok := req[corev1.ResourceCPU]; !ok {
		ps.add(CodeGPURequests, where, "no CPU request: set resources.requests.cpu")
	}
	if _, ok := req[corev1.ResourceMemory]; !ok {
		ps.add(CodeGPURequests, where, "no memory request: set resources.requests.memory to what loading a checkpoint takes (tens of GiB), or the pod is the first one evicted")
	}
	if c == nil {
		return
	}
	// The pod must outlive an engine's stop and the runner's drain: the
	// job in flight is handed back to the queue in that time.
	need := durationSetting(*c, "stop-grace") + durationSetting(*c, "shutdown-timeout")
	grace := 30 * time.Second // Kubernetes' default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	if grace < need {
		ps.add(CodeGPUGrace, where, "terminationGracePeriodSeconds is %s, less than the engine's stop (--stop-grace) plus the runner's drain (--shutdown-timeout), %s: a rollout would kill the job in flight", grace, need)
	}
}

// checkRollout refuses a Deployment of GPU pods that rolls out by surge.
func checkRollout(ps *Problems, where string, d *appsv1.Deployment) {
	s := d.Spec.Strategy
	if s.Type == appsv1.RecreateDeploymentStrategyType {
		return
	}
	surge := intstr.FromString("25%") // Kubernetes' default
	if s.RollingUpdate != nil && s.RollingUpdate.MaxSurge != nil {
		surge = *s.RollingUpdate.MaxSurge
	}
	if n, err := intstr.GetScaledValueFromIntOrPercent(&surge, 1, true); err != nil || n != 0 {
		ps.add(CodeGPUSurge, where, "a rolling update with maxSurge %s starts a new GPU pod before it stops an old one: use strategy Recreate, or maxSurge 0 and maxUnavailable 1", surge.String())
	}
}

// checkEmptyDirs refuses an emptyDir on disk without a size limit.
func checkEmptyDirs(ps *Problems, where string, pod corev1.PodSpec) {
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.Medium != corev1.StorageMediumMemory && v.EmptyDir.SizeLimit == nil {
			ps.add(CodeUnboundedVolume, where, "emptyDir %s has no sizeLimit: a large checkpoint or upload would fill the node's disk (set one, or use an ephemeral volume of a storage class)", v.Name)
		}
	}
}

// checkGrader holds the quality stage's pod to what bubblewrap needs.
func checkGrader(ps *Problems, where string, pod corev1.PodSpec, ct corev1.Container) {
	if pod.HostUsers == nil || *pod.HostUsers {
		ps.add(CodeGraderSandbox, where, "the quality stage grades code under bubblewrap: give its pod a user namespace of its own (hostUsers: false)")
	}
	if ct.SecurityContext == nil || ct.SecurityContext.ProcMount == nil || *ct.SecurityContext.ProcMount != corev1.UnmaskedProcMount {
		ps.add(CodeGraderSandbox, where, "the quality stage's sandbox mounts a /proc of its own: set securityContext.procMount: Unmasked (allowed with hostUsers: false)")
	}
	if gpuLimit(ct) {
		ps.add(CodeGPUUserNamespace, where, "the quality stage grades with a user namespace: it may not ask for a GPU")
	}
}

// checkPVC refuses a ReadOnlyMany claim that nothing fills.
func checkPVC(ps *Problems, where string, pvc *corev1.PersistentVolumeClaim) {
	rox, writable := false, false
	for _, m := range pvc.Spec.AccessModes {
		switch m {
		case corev1.ReadOnlyMany:
			rox = true
		case corev1.ReadWriteOnce, corev1.ReadWriteMany, corev1.ReadWriteOncePod:
			writable = true
		}
	}
	if rox && !writable && pvc.Spec.DataSource == nil && pvc.Spec.DataSourceRef == nil && pvc.Spec.VolumeName == "" {
		ps.add(CodeUnfilledVolume, where, "a ReadOnlyMany claim with no data source: block provisioners do not create one and no pod can write it; deliver its contents another way (campaigns: `arena campaign push`)")
	}
}

// checkConfigMapSecrets refuses a store URL with a password in a
// ConfigMap.
func checkConfigMapSecrets(ps *Problems, where string, cm *corev1.ConfigMap) {
	for k, v := range cm.Data {
		if strings.Contains(v, "://") && strings.Contains(v, "@") {
			if userinfo, _, ok := strings.Cut(strings.SplitN(v, "://", 2)[1], "@"); ok && strings.Contains(userinfo, ":") {
				ps.add(CodeSecretInConfigMap, where, "%s holds a password: put it in a Secret (for the store: %s, key LOWBARENA_STORE)", k, storeSecret)
			}
		}
	}
}

// CLI is the operator's command, arena, as an image (lowbarena/arena,
// deploy/Dockerfile.arena): the one-shot jobs that push campaigns,
// collect artifacts and drop old telemetry run it.
const CLI = "arena"

// CLIVerbs are the arena verbs a job or a compose service may run.
var CLIVerbs = map[string]bool{"campaign": true, "example": true, "gc": true, "retention": true, "reference": true}

// checkCLI holds a container of the arena CLI to its verbs.
func checkCLI(ps *Problems, where string, args []string) {
	if len(args) == 0 || !CLIVerbs[args[0]] {
		verb := ""
		if len(args) > 0 {
			verb = args[0]
		}
		ps.add(CodeUnknownFlag, where, "the arena CLI runs %q, which is no verb a job runs (campaign, example, gc, retention, reference)", verb)
	}
}

// PodMonitor is the part of the Prometheus Operator's PodMonitor
// (monitoring.coreos.com/v1) the arena's pods are held to: client-go's
// scheme has no such type, so the check decodes it itself, strictly.
type PodMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector"`
		NamespaceSelector   map[string]any       `json:"namespaceSelector,omitempty"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path,omitempty"`
			Interval string `json:"interval,omitempty"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// DeepCopyObject makes PodMonitor a runtime.Object (a shallow copy: the
// checks never change it).
func (p *PodMonitor) DeepCopyObject() runtime.Object { c := *p; return &c }

// checkPodMonitors holds every pod that serves metrics to the
// PodMonitors, where there are any: one of them must select its labels
// and scrape its port named metrics on /metrics.
func checkPodMonitors(ps *Problems, monitors []*PodMonitor, where string, pod corev1.PodTemplateSpec) {
	if len(monitors) == 0 {
		return
	}
	for _, m := range monitors {
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		for _, e := range m.Spec.PodMetricsEndpoints {
			if e.Port == "metrics" && (e.Path == "" || e.Path == app.PathMetrics) {
				return
			}
		}
	}
	ps.add(CodeMetrics, where, "no PodMonitor scrapes this pod (labels %v) on its metrics port: the Prometheus Operator reads no annotations; give it the label lowbarena.dev/metrics: \"true\"", pod.Labels)
}
