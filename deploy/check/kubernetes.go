package check

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/lowbarena/lowbarena/platform/app"
)

// Object is one decoded manifest with the file it came from.
type Object struct {
	File string
	runtime.Object
}

// strict decodes with client-go's scheme and refuses unknown and
// duplicated fields, as `kubectl apply --validate=strict` does.
var strict = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// DecodeManifests decodes every document of every .yaml file in dir
// strictly with the Kubernetes API types. Files that hold no Kubernetes
// object (Helm values: no apiVersion) are skipped; a document the
// scheme does not know, or that holds a field its type has not, is a
// problem.
func DecodeManifests(dir string) ([]Object, Problems, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, nil, fmt.Errorf("check: %w", err)
	}
	sort.Strings(files)
	var objs []Object
	var ps Problems
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("check: %w", err)
		}
		o, p, err := DecodeManifest(filepath.Base(f), raw)
		if err != nil {
			return nil, nil, err
		}
		objs, ps = append(objs, o...), append(ps, p...)
	}
	return objs, ps, nil
}

// DecodeManifest decodes the documents of one file (see DecodeManifests).
func DecodeManifest(name string, raw []byte) ([]Object, Problems, error) {
	var objs []Object
	var ps Problems
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("check: %s: document %d: %w", name, i, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, nil, fmt.Errorf("check: %s: document %d: %w", name, i, err)
		}
		if tm.APIVersion == "" && tm.Kind == "" {
			continue // not a Kubernetes object (Helm values, an empty document)
		}
		where := fmt.Sprintf("%s: document %d (%s %s)", name, i, tm.APIVersion, tm.Kind)
		if tm.APIVersion == "monitoring.coreos.com/v1" && tm.Kind == "PodMonitor" {
			var pm PodMonitor
			if err := yaml.UnmarshalStrict(doc, &pm); err != nil {
				ps.add(CodeUnknownField, where, "%v", err)
				continue
			}
			objs = append(objs, Object{File: name, Object: &pm})
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		switch {
		case runtime.IsNotRegisteredError(err):
			ps.add(CodeUnknownKind, where, "no Kubernetes type: %v", err)
		case runtime.IsStrictDecodingError(err):
			ps.add(CodeUnknownField, where, "%v", err)
		case err != nil:
			ps.add(CodeUnknownField, where, "does not decode: %v", err)
		default:
			objs = append(objs, Object{File: name, Object: obj})
		}
	}
	return objs, ps, nil
}

// nkeySecret is the prefix of the secrets holding a user's seed:
// lowbarena-nkey-<user>, made from deploy/secrets/<user>.env.
const nkeySecret = "lowbarena-nkey-"

// gpuResource is the NVIDIA device plugin's resource.
const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// Kubernetes holds the manifests to the binaries: every container of a
// Deployment, StatefulSet or Job whose image is lowbarena/<name> is the
// container of that binary (Container.Check), its environment from its
// env and the ConfigMaps it reads, its user from its
// lowbarena-nkey-<user> secret, its mounts from its volumeMounts (each
// of a volume of its pod); a workload's selector matches its pods'
// labels; the runner asks for a GPU; every binary has a container; a
// service's pod serves its metrics where its containerPort named metrics,
// its prometheus.io annotations and its probes say (checkPodMetrics).
func Kubernetes(objs []Object, bins map[string]Binary) Problems { //nolint:gocyclo // a table of checks over the manifests, one per rule listed in the doc comment
	var ps Problems
	configMaps := map[string]map[string]string{}
	for _, o := range objs {
		switch v := o.Object.(type) {
		case *corev1.ConfigMap:
			configMaps[v.Name] = v.Data
			checkConfigMapSecrets(&ps, fmt.Sprintf("%s: ConfigMap %s", o.File, v.Name), v)
		case *corev1.PersistentVolumeClaim:
			checkPVC(&ps, fmt.Sprintf("%s: PersistentVolumeClaim %s", o.File, v.Name), v)
		}
	}
	var monitors []*PodMonitor
	for _, o := range objs {
		if pm, ok := o.Object.(*PodMonitor); ok {
			monitors = append(monitors, pm)
		}
	}
	seen := map[string]bool{}
	for _, o := range objs {
		var meta metav1.ObjectMeta
		var sel *metav1.LabelSelector
		var pod corev1.PodTemplateSpec
		switch w := o.Object.(type) {
		case *appsv1.Deployment:
			meta, sel, pod = w.ObjectMeta, w.Spec.Selector, w.Spec.Template
		case *appsv1.StatefulSet:
			meta, sel, pod = w.ObjectMeta, w.Spec.Selector, w.Spec.Template
		case *batchv1.Job:
			meta, pod = w.ObjectMeta, w.Spec.Template
		case *batchv1.CronJob:
			meta, pod = w.ObjectMeta, w.Spec.JobTemplate.Spec.Template
		default:
			continue
		}
		where := fmt.Sprintf("%s: %s", o.File, meta.Name)
		if sel != nil {
			s, err := metav1.LabelSelectorAsSelector(sel)
			if err != nil || !s.Matches(labels.Set(pod.Labels)) {
				ps.add(CodeSelector, where, "the selector %v does not match the pods' labels %v: the workload would own no pod", sel.MatchLabels, pod.Labels)
			}
		}
		volumes := map[string]bool{}
		for _, v := range pod.Spec.Volumes {
			volumes[v.Name] = true
		}
		if ss, ok := o.Object.(*appsv1.StatefulSet); ok {
			for _, claim := range ss.Spec.VolumeClaimTemplates {
				volumes[claim.Name] = true
			}
		}
		checkEmptyDirs(&ps, where, pod.Spec)
		for _, ct := range pod.Spec.InitContainers {
			if strings.TrimPrefix(strings.SplitN(ct.Image, ":", 2)[0], "lowbarena/") == CLI {
				checkCLI(&ps, where+"/"+ct.Name, append(append([]string(nil), ct.Command...), ct.Args...))
			}
		}
		for _, ct := range pod.Spec.Containers {
			cw := where + "/" + ct.Name
			for _, m := range ct.VolumeMounts {
				if !volumes[m.Name] {
					ps.add(CodeMissingVolume, cw, "mounts volume %q, which the pod has not", m.Name)
				}
			}
			image := strings.SplitN(ct.Image, ":", 2)[0]
			name, ok := strings.CutPrefix(image, "lowbarena/")
			if !ok {
				if gpuLimit(ct) {
					checkGPUPod(&ps, cw, pod.Spec, ct, nil)
				}
				continue // nats, clickhouse
			}
			if name == CLI {
				checkCLI(&ps, cw, append(append([]string(nil), ct.Command...), ct.Args...))
				continue
			}
			b, ok := bins[name]
			if !ok {
				ps.add(CodeUnknownBinary, cw, "image %s is no service's (lowbarena/<service>, deploy/Dockerfile)", ct.Image)
				continue
			}
			seen[name] = true
			c := Container{Where: cw, Binary: b, Args: append(append([]string(nil), ct.Command...), ct.Args...), Env: map[string]string{}}
			for _, src := range ct.EnvFrom {
				if src.ConfigMapRef != nil {
					data, ok := configMaps[src.ConfigMapRef.Name]
					if !ok {
						ps.add(CodeMissingEnv, cw, "reads ConfigMap %s, which no manifest defines", src.ConfigMapRef.Name)
					}
					for k, v := range data {
						c.Env[src.Prefix+k] = v
					}
				}
				if src.SecretRef != nil {
					if src.SecretRef.Name == storeSecret {
						c.Env[app.EnvStore] = "clickhouse://(Secret " + storeSecret + ")"
						continue
					}
					user, ok := strings.CutPrefix(src.SecretRef.Name, nkeySecret)
					if !ok {
						continue
					}
					if c.User != "" {
						ps.add(CodeWrongCredentials, cw, "two users' secrets: give one")
					}
					c.User = user
				}
			}
			for _, e := range ct.Env {
				c.Env[e.Name] = e.Value
			}
			for _, m := range ct.VolumeMounts {
				c.Mounts = append(c.Mounts, m.MountPath)
			}
			c.Check(&ps)
			if _, job := o.Object.(*batchv1.Job); !job && c.servesMetrics() {
				if port := c.checkMetrics(&ps); port > 0 {
					checkPodMetrics(&ps, cw, pod, ct, port)
					checkPodMonitors(&ps, monitors, cw, pod)
				}
			}
			if name == "runner" && !gpuLimit(ct) {
				ps.add(CodeNoGPU, cw, "the runner asks for no GPU: set resources.limits[%s] to 1 (one runner per GPU)", gpuResource)
			}
			if gpuLimit(ct) {
				checkGPUPod(&ps, cw, pod.Spec, ct, &c)
				if d, ok := o.Object.(*appsv1.Deployment); ok {
					checkRollout(&ps, where, d)
				}
			}
			if name == "quality" {
				checkGrader(&ps, cw, pod.Spec, ct)
			}
		}
	}
	for _, n := range Names(bins) {
		if !seen[n] {
			ps.add(CodeMissingService, "deploy/kubernetes", "no container runs %s: add a Deployment with image lowbarena/%s", n, n)
		}
	}
	return ps
}
