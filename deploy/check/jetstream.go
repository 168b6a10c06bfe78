package check

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/compose-spec/compose-go/v2/types"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// CodeJetStream: the arena's streams, buckets and object stores are not
// bounded by what a NATS node may store: no store limit on the nodes
// (max_file_store, the chart's fileStore.maxSize), limits that add up
// past their own volume, or a volume (--js-volume) larger than a node's
// store, so JetStream would fill the disk or refuse to provision.
const CodeJetStream = "deploy_jetstream_unbounded"

// limitSettings are the JetStream limits' flags and variables a
// provision container may set (platform/app's RegisterLimitFlags).
var limitSettings = []struct {
	flag, env string
	field     func(*bus.Limits) *int64
}{
	{"js-volume", app.EnvJSVolume, func(l *bus.Limits) *int64 { return &l.Volume }},
	{"js-arena-max-bytes", app.EnvJSArenaMaxBytes, func(l *bus.Limits) *int64 { return &l.ArenaMaxBytes }},
	{"js-uploads-max-bytes", app.EnvJSUploadsMaxBytes, func(l *bus.Limits) *int64 { return &l.UploadsMaxBytes }},
	{"js-artifacts-max-bytes", app.EnvJSArtifactsMaxBytes, func(l *bus.Limits) *int64 { return &l.ArtifactsMaxBytes }},
}

// provisionLimits are the limits a provision container provisions.
func provisionLimits(c Container) (bus.Limits, error) {
	var l bus.Limits
	for _, s := range limitSettings {
		v, ok := c.setting(s.flag, s.env)
		if !ok || v == "" {
			continue
		}
		n, err := app.ParseBytes(v)
		if err != nil {
			return l, fmt.Errorf("%s: %w", s.env, err)
		}
		*s.field(&l) = n
	}
	return l, nil
}

// checkJetStream holds the limits a provision container sets to a node's
// store (store bytes; 0 when the nodes set none).
func checkJetStream(ps *Problems, where string, c Container, store int64, storeWhere string) {
	l, err := provisionLimits(c)
	if err != nil {
		ps.add(CodeJetStream, where, "%v", err)
		return
	}
	if err := l.Validate(); err != nil {
		ps.add(CodeJetStream, where, "%v", err)
		return
	}
	vol := l.WithDefaults().Volume
	switch {
	case store <= 0:
		ps.add(CodeJetStream, storeWhere, "the NATS nodes set no store limit: JetStream would take the disk until it is full; set it a little under the volume")
	case vol > store:
		ps.add(CodeJetStream, where, "the arena's limits are shares of a %s volume (%s), more than a NATS node stores (%s in %s): set %s to at most the node's store",
			app.FormatBytes(vol), app.EnvJSVolume, app.FormatBytes(store), storeWhere, app.EnvJSVolume)
	}
}

// maxFileStore reads max_file_store from a NATS server configuration.
var maxFileStore = regexp.MustCompile(`(?m)^\s*max_file_store\s*[:=]?\s*([0-9]+\s*[A-Za-z]*)\s*$`)

// NATSStore is the bytes a NATS node configuration lets JetStream store
// on file (max_file_store), 0 when it sets none.
func NATSStore(conf []byte) (int64, error) {
	m := maxFileStore.FindSubmatch(conf)
	if m == nil {
		return 0, nil
	}
	n, err := app.ParseBytes(string(m[1]))
	if err != nil {
		return 0, fmt.Errorf("check: max_file_store: %w", err)
	}
	return n, nil
}

// HelmStore is the bytes the NATS chart's values let JetStream store on
// file: fileStore.maxSize, which "defaults to the PVC size".
func HelmStore(raw []byte) (int64, error) {
	var v natsValues
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return 0, fmt.Errorf("check: nats-values.yaml: %w", err)
	}
	fs := v.Config.JetStream.FileStore
	size := fs.MaxSize
	if size == "" {
		size = fs.PVC.Size
	}
	if size == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return 0, fmt.Errorf("check: nats-values.yaml: fileStore %q: %w", size, err)
	}
	return q.Value(), nil
}

// errNoProvision: no container provisions the arena.
var errNoProvision = errors.New("check: no container runs provision")

// KubernetesJetStream holds the provision Job's limits to the NATS
// chart's store (store bytes, HelmStore).
func KubernetesJetStream(objs []Object, store int64) (Problems, error) {
	var ps Problems
	found := false
	for _, o := range objs {
		j, ok := o.Object.(*batchv1.Job)
		if !ok {
			continue
		}
		for _, ct := range j.Spec.Template.Spec.Containers {
			args := append(append([]string(nil), ct.Command...), ct.Args...)
			if len(args) == 0 || args[0] != "provision" {
				continue
			}
			found = true
			c := Container{Where: o.File + ": " + j.Name + "/" + ct.Name, Args: args, Env: envOf(objs, ct)}
			checkJetStream(&ps, c.Where, c, store, "nats-values.yaml (config.jetstream.fileStore)")
		}
	}
	if !found {
		return nil, errNoProvision
	}
	return ps, nil
}

// envOf is a container's environment: its ConfigMaps' data and its own
// variables (values from elsewhere are empty).
func envOf(objs []Object, ct corev1.Container) map[string]string {
	env := map[string]string{}
	for _, src := range ct.EnvFrom {
		if src.ConfigMapRef == nil {
			continue
		}
		for _, o := range objs {
			if cm, ok := o.Object.(*corev1.ConfigMap); ok && cm.Name == src.ConfigMapRef.Name {
				for k, v := range cm.Data {
					env[src.Prefix+k] = v
				}
			}
		}
	}
	for _, e := range ct.Env {
		env[e.Name] = e.Value
	}
	return env
}

// ComposeJetStream holds the compose provision service's limits to the
// NATS nodes' max_file_store (store bytes, NATSStore).
func ComposeJetStream(p *types.Project, store int64) (Problems, error) {
	var ps Problems
	found := false
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		if len(s.Command) == 0 || s.Command[0] != "provision" {
			continue
		}
		found = true
		c := Container{Where: "docker-compose.yml: " + name, Args: s.Command, Env: map[string]string{}}
		for k, v := range s.Environment {
			if v != nil {
				c.Env[k] = *v
			}
		}
		checkJetStream(&ps, c.Where, c, store, "deploy/nats/cluster.conf (max_file_store)")
	}
	if !found {
		return nil, errNoProvision
	}
	return ps, nil
}
