// Package check holds the arena's deployment files to its binaries, here,
// without Docker or a Kubernetes cluster: docker-compose.yml as Docker
// Compose itself reads it (compose-go), the manifests of
// deploy/kubernetes decoded strictly with the Kubernetes API types
// (client-go's scheme; an unknown or duplicated field is refused), and
// NATS's Helm values. Every service's image, command, environment,
// credentials and volumes must match what its binary reads: its flags and
// the environment variables its flags name. Every service serves its
// metrics where Prometheus looks for them: deploy/prometheus/prometheus.yml
// scrapes exactly the compose services with a metrics address, on their
// ports, and each Kubernetes pod names its metrics port, its
// prometheus.io annotations and its probes on /healthz and /readyz.
//
// It is its own module so that the services never link compose-go or
// the Kubernetes API.
package check
