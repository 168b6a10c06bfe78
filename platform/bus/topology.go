// Package bus carries the arena's events on NATS JetStream: it provisions
// the streams, KV buckets and object stores, publishes validated CloudEvents
// with trace context and deterministic message ids, and runs the consume
// loop in which handlers return an outcome (ack, retry or poison).
package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Buckets and object stores of the arena.
const (
	// BucketSubmissions holds each submission record as it grows (the JSON
	// of the fixtures), keyed by submission id.
	BucketSubmissions = "submissions"
	// BucketRounds holds round state, keyed by round id.
	BucketRounds = "rounds"
	// BucketBundles maps a bundle digest to the first submission that
	// carried it, so the build stage recognises a bundle submitted twice.
	BucketBundles = "bundles"
	// BucketReferences caches the runner's BF16 reference measurements
	// per pod, campaign and reference digest, so a pod measures its
	// reference once. The runner owns it.
	BucketReferences = "references"
	// BucketQualityReferences holds the quality stage's BF16 reference
	// rows' state per campaign and suite version (done or failed, with the
	// job's result). The quality stage owns it.
	BucketQualityReferences = "quality_references"
	// BucketRoundViews holds the gateway's view of each round, projected
	// from round.* events for people (the live page). The gateway owns
	// it; the round service's own state stays in BucketRounds.
	BucketRoundViews = "round_views"
	// BucketScoreInputs joins the stage outcomes a score needs, per
	// submission, so the join survives restarts.
	BucketScoreInputs = "score_inputs"
	// BucketParticipants holds the arena's participants and operators
	// and their API tokens (each token's argon2id hash, never its
	// secret). The gateway owns it; the operator's CLI reaches it through
	// the gateway's endpoints (ctl.SubjectParticipant*).
	BucketParticipants = "participants"
	// BucketUsage holds each participant's ledger for its quotas: its
	// submissions of the last day and the GPU-hours charged to it over
	// the last week. The gateway owns it.
	BucketUsage = "participant_usage"
	// BucketPods is the registry of the arena's runners: one key per
	// runner (<pod>.<runner>), its pod, GPU and what it runs now,
	// rewritten by the runner every third of the bucket's TTL and gone
	// a TTL after its runner stopped renewing it (Topology.PodsTTL). The
	// runners own it; `arena pods` reads it.
	BucketPods = "pods"
	// BucketCampaigns maps each task id to the campaign version the arena
	// runs now (package platform/campaigns: its bundle in ObjectArtifacts,
	// its version number, who pushed it and when). Its history is the
	// list of versions. The operator writes it (`arena campaign push`);
	// the stages that need campaigns watch it.
	BucketCampaigns = "campaigns"
	// CampaignsHistory is how many versions of a campaign BucketCampaigns
	// keeps.
	CampaignsHistory = 16
	// ObjectUploads holds bundles as participants upload them.
	ObjectUploads = "uploads"
	// ObjectArtifacts holds bundles the build stage accepted, content
	// addressed (see package artifact).
	ObjectArtifacts = "artifacts"
)

// MaxEventBytes bounds the data of one event. The server's max_payload is
// larger (1 MiB), so an oversized event still reaches consumers, which
// dead-letter it rather than choke on it.
const MaxEventBytes = 512 << 10

// Topology sizes the streams.
type Topology struct {
	// Replicas is 1 on one machine and 3 on a cluster.
	Replicas int
	// Duplicates is the deduplication window of the pipeline streams: a
	// retried publish within it is dropped by id. Zero means 24 h.
	Duplicates time.Duration
	// DLQMaxAge bounds how long poison messages are kept. Zero means 30 days.
	DLQMaxAge time.Duration
	// PodsTTL is how long a runner's entry in BucketPods outlives its
	// last heartbeat (the bucket's max age). Zero means 30 s.
	PodsTTL time.Duration
}

// DefaultPodsTTL is Topology.PodsTTL's default.
const DefaultPodsTTL = 30 * time.Second

func (t Topology) withDefaults() Topology {
	if t.Replicas <= 0 {
		t.Replicas = 1
	}
	if t.Duplicates <= 0 {
		t.Duplicates = 24 * time.Hour
	}
	if t.DLQMaxAge <= 0 {
		t.DLQMaxAge = 30 * 24 * time.Hour
	}
	if t.PodsTTL <= 0 {
		t.PodsTTL = DefaultPodsTTL
	}
	return t
}

// StreamConfigs returns the three streams of the arena.
func (t Topology) StreamConfigs() []jetstream.StreamConfig {
	t = t.withDefaults()
	return []jetstream.StreamConfig{
		{
			Name:        events.StreamArena,
			Description: "lowbarena pipeline facts: the event log",
			Subjects:    []string{events.SubjectRootArena + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    t.Replicas,
			Duplicates:  t.Duplicates,
			MaxMsgSize:  1 << 20,
		},
		{
			Name:        events.StreamRunnerJobs,
			Description: "lowbarena GPU jobs: a work queue, one runner per job",
			Subjects:    []string{events.SubjectRootJobs + ".>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    t.Replicas,
			Duplicates:  t.Duplicates,
			MaxMsgSize:  1 << 20,
		},
		{
			Name:        events.StreamDLQ,
			Description: "lowbarena poison messages, with their reason",
			Subjects:    []string{events.SubjectRootDLQ + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    t.Replicas,
			MaxAge:      t.DLQMaxAge,
			Duplicates:  time.Hour,
			MaxMsgSize:  2 << 20,
		},
	}
}

// Provision creates or updates the streams, KV buckets and object stores. It
// is idempotent: every service calls it at start, and a second call changes
// nothing.
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) error {
	t = t.withDefaults()
	for _, sc := range t.StreamConfigs() {
		if err := placed(ctx, func() error { _, err := js.CreateOrUpdateStream(ctx, sc); return err }); err != nil {
			return fmt.Errorf("bus: provision stream %s: %w", sc.Name, err)
		}
	}
	for _, kv := range []jetstream.KeyValueConfig{
		{Bucket: BucketSubmissions, Description: "submission records", History: 8, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketRounds, Description: "round state", History: 8, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketBundles, Description: "bundle digest to its first submission", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketReferences, Description: "the runner's BF16 reference measurements per pod and campaign", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketQualityReferences, Description: "quality BF16 reference rows per campaign and suite version", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketRoundViews, Description: "rounds as people see them, projected from round events", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketScoreInputs, Description: "stage outcomes joined per submission for its score", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketParticipants, Description: "participants, operators and their API tokens (hashed)", History: 4, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketUsage, Description: "each participant's submissions and GPU-hours within its quota windows", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketCampaigns, Description: "each task's campaign: its current version and the versions before it", History: CampaignsHistory, Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: BucketPods, Description: "the runners: pod, GPU and what each runs now; an entry lapses a TTL after its last heartbeat", History: 1, TTL: t.PodsTTL, Storage: jetstream.FileStorage, Replicas: t.Replicas},
	} {
		if err := placed(ctx, func() error { _, err := js.CreateOrUpdateKeyValue(ctx, kv); return err }); err != nil {
			return fmt.Errorf("bus: provision KV bucket %s: %w", kv.Bucket, err)
		}
	}
	for _, os := range []jetstream.ObjectStoreConfig{
		{Bucket: ObjectUploads, Description: "bundles as uploaded", Storage: jetstream.FileStorage, Replicas: t.Replicas},
		{Bucket: ObjectArtifacts, Description: "bundles the build stage accepted", Storage: jetstream.FileStorage, Replicas: t.Replicas},
	} {
		if err := placed(ctx, func() error { _, err := js.CreateOrUpdateObjectStore(ctx, os); return err }); err != nil {
			return fmt.Errorf("bus: provision object store %s: %w", os.Bucket, err)
		}
	}
	return nil
}

// ErrStreamMismatch is returned when the ARENA stream exists but is not
// the one the caller's Topology describes (its subjects, retention,
// storage or replicas differ): a service started against the wrong
// cluster, or set for another replica count than the operator
// provisioned. It is never "fixed" by re-creating the stream, which would
// lose the event log.
var ErrStreamMismatch = errors.New(string(reason.StreamConfigMismatch) + ": the arena's event stream is not the one this service is set for")

// CheckStream is CheckProvisioned that also holds the ARENA stream's
// configuration to t's: subjects, retention, storage and replicas. It
// reads the stream's info only (services may read nothing else).
func CheckStream(ctx context.Context, js jetstream.JetStream, t Topology) error {
	s, err := js.Stream(ctx, events.StreamArena)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNotProvisioned
	}
	if err != nil {
		return fmt.Errorf("bus: look up stream %s: %w", events.StreamArena, err)
	}
	have := s.CachedInfo().Config
	want := t.StreamConfigs()[0]
	var diff []string
	if !slices.Equal(have.Subjects, want.Subjects) {
		diff = append(diff, fmt.Sprintf("subjects %v, want %v", have.Subjects, want.Subjects))
	}
	if have.Retention != want.Retention {
		diff = append(diff, fmt.Sprintf("retention %s, want %s", have.Retention, want.Retention))
	}
	if have.Storage != want.Storage {
		diff = append(diff, fmt.Sprintf("storage %s, want %s", have.Storage, want.Storage))
	}
	if have.Replicas != want.Replicas {
		diff = append(diff, fmt.Sprintf("%d replicas, want %d", have.Replicas, want.Replicas))
	}
	if len(diff) > 0 {
		return fmt.Errorf("%w: %s has %s", ErrStreamMismatch, events.StreamArena, strings.Join(diff, "; "))
	}
	return nil
}

// errCodeNoPeers is JetStream's "no suitable peers for placement" (nats.go
// names no constant for it).
const errCodeNoPeers jetstream.ErrorCode = 10005

// placementWait bounds how long Provision waits for a cluster to have
// enough peers online for a stream's replicas.
var placementWait = 30 * time.Second

// placed runs create, and runs it again while the cluster answers that it
// has no suitable peers for placement (API error 10005): a cluster that has
// just started, or whose peer missed a heartbeat on a loaded machine, has
// a peer offline for a moment, and an operator's provision must not fail
// for it. Any other error, or one that lasts placementWait, is returned.
func placed(ctx context.Context, create func() error) error {
	deadline := time.Now().Add(placementWait)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		err := create()
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeNoPeers || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// ErrNotProvisioned is returned when the arena's streams are missing: the
// arena is not running, or was never started against this NATS.
var ErrNotProvisioned = errors.New("bus: the arena's streams do not exist on this NATS server")

// CheckProvisioned reports ErrNotProvisioned when the ARENA stream is
// missing.
func CheckProvisioned(ctx context.Context, js jetstream.JetStream) error {
	if _, err := js.Stream(ctx, events.StreamArena); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return ErrNotProvisioned
		}
		return fmt.Errorf("bus: look up stream %s: %w", events.StreamArena, err)
	}
	return nil
}
