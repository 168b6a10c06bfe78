package check

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/lowbarena/lowbarena/platform/access"
)

// natsValues is the part of the NATS Helm chart's values the arena
// depends on.
type natsValues struct {
	Config struct {
		Cluster struct {
			Enabled  bool `json:"enabled"`
			Replicas int  `json:"replicas"`
		} `json:"cluster"`
		JetStream struct {
			Enabled   bool `json:"enabled"`
			FileStore struct {
				PVC struct {
					Size string `json:"size"`
				} `json:"pvc"`
				MaxSize string `json:"maxSize"`
			} `json:"fileStore"`
		} `json:"jetstream"`
		Merge map[string]any `json:"merge"`
	} `json:"config"`
	Container struct {
		Env map[string]any `json:"env"`
	} `json:"container"`
	PodTemplate struct {
		// TopologySpreadConstraints is the chart's map of topologyKey to
		// constraint.
		TopologySpreadConstraints map[string]struct {
			MaxSkew           int    `json:"maxSkew"`
			WhenUnsatisfiable string `json:"whenUnsatisfiable"`
		} `json:"topologySpreadConstraints"`
	} `json:"podTemplate"`
}

// NATSValues holds NATS's Helm values (deploy/kubernetes/nats-values.yaml)
// to what the arena needs: three clustered nodes with JetStream (its
// streams are R3), auth.conf included, and every user's public key
// (LOWBARENA_NKEY_<USER>, platform/access) in the nodes' environment: a
// missing one stops the node at start.
func NATSValues(raw []byte) (Problems, error) {
	var v natsValues
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("check: nats-values.yaml: %w", err)
	}
	var ps Problems
	const where = "nats-values.yaml"
	if !v.Config.Cluster.Enabled || v.Config.Cluster.Replicas != 3 {
		ps.add(CodeNATS, where, "config.cluster must be enabled with 3 replicas (the arena's streams are R3), got enabled=%v replicas=%d",
			v.Config.Cluster.Enabled, v.Config.Cluster.Replicas)
	}
	if !v.Config.JetStream.Enabled {
		ps.add(CodeNATS, where, "config.jetstream.enabled must be true")
	}
	if c, ok := v.PodTemplate.TopologySpreadConstraints["kubernetes.io/hostname"]; !ok || c.MaxSkew != 1 || c.WhenUnsatisfiable != "DoNotSchedule" {
		ps.add(CodeNATS, where, "podTemplate.topologySpreadConstraints must spread the peers over nodes (kubernetes.io/hostname: {maxSkew: 1, whenUnsatisfiable: DoNotSchedule}): three R3 peers on one node do not survive it")
	}
	pvc, perr := resource.ParseQuantity(v.Config.JetStream.FileStore.PVC.Size)
	max, merr := resource.ParseQuantity(v.Config.JetStream.FileStore.MaxSize)
	switch {
	case perr != nil:
		ps.add(CodeNATS, where, "config.jetstream.fileStore.pvc.size %q is no size: size the volume (docs/operators/jetstream.md)", v.Config.JetStream.FileStore.PVC.Size)
	case merr != nil:
		ps.add(CodeNATS, where, "config.jetstream.fileStore.maxSize %q is no size: set it a little under the volume, so JetStream refuses writes before the disk is full", v.Config.JetStream.FileStore.MaxSize)
	case max.Cmp(pvc) >= 0:
		ps.add(CodeNATS, where, "config.jetstream.fileStore.maxSize %s is not under the volume's %s: JetStream would fail on a full disk instead of refusing writes", max.String(), pvc.String())
	}
	if _, ok := v.Config.Merge["$include"]; !ok {
		ps.add(CodeNATS, where, "config.merge must $include auth.conf (deploy/nats/auth.conf): without it every user is refused")
	}
	for _, u := range access.Names() {
		if _, ok := v.Container.Env[access.EnvPublicKey(u)]; !ok {
			ps.add(CodeNATS, where, "container.env lacks %s: auth.conf reads user %s's public key from it", access.EnvPublicKey(u), u)
		}
	}
	return ps, nil
}
