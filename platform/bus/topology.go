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
	// Limits bound what each stream, bucket and object store may hold on
	// each node. The zero value is sized for DefaultVolume.
	Limits Limits
}

// DefaultPodsTTL is Topology.PodsTTL's default.
const DefaultPodsTTL = 30 * time.Second

// DefaultVolume is the JetStream store of one node that the default
// Limits are sized for: the 20 GiB that the deployment's NATS servers
// are given (max_file_store, the Helm chart's fileStore). A larger
// volume is set with Limits.Volume (--js-volume, LOWBARENA_JS_VOLUME).
const DefaultVolume int64 = 20 << 30

// DefaultUploadsMaxAge is how long an upload that no build consumed is
// kept (Limits.UploadsMaxAge's default): a submission's upload is
// deleted once built, so one older than this was never built.
const DefaultUploadsMaxAge = 7 * 24 * time.Hour

// Limits bound the bytes (and messages) that each stream, KV bucket and
// object store keeps on one node. JetStream reserves every MaxBytes on
// each node that holds a replica, and at R3 each of the three nodes
// holds all of them, so the sum of the limits must fit one node's store
// (the server's max_file_store): a sum above it is refused when the
// arena is provisioned ("insufficient storage resources"), not when the
// volume fills. Zero fields take their share of Volume (see the
// fractions in withDefaults and docs/operators/jetstream.md).
type Limits struct {
	// Volume is the bytes JetStream may store on each node; zero means
	// DefaultVolume. The fields below that are zero are its fractions.
	Volume int64
	// ArenaMaxBytes bounds the ARENA stream, the event log.
	ArenaMaxBytes int64
	// JobsMaxBytes and JobsMaxMsgs bound the RUNNER_JOBS work queue.
	JobsMaxBytes int64
	JobsMaxMsgs  int64
	// DLQMaxBytes bounds the DLQ stream (beside its DLQMaxAge).
	DLQMaxBytes int64
	// KVMaxBytes bounds each KV bucket.
	KVMaxBytes int64
	// UploadsMaxBytes bounds the uploads object store; UploadsMaxAge is
	// its objects' TTL (zero means DefaultUploadsMaxAge).
	UploadsMaxBytes int64
	UploadsMaxAge   time.Duration
	// ArtifactsMaxBytes bounds the artifacts object store.
	ArtifactsMaxBytes int64
}

// Shares of Limits.Volume, in thousandths, that the limits left zero
// take. They sum to 940: 6% of the volume stays free for the file
// store's own indexes and for a stream that briefly holds more than its
// limit while it is updated.
const (
	shareUploads   = 250 // 25%: uploads wait only until they are built
	shareArtifacts = 450 // 45%: accepted bundles, collected by `arena gc`
	shareArena     = 100 // 10%: the event log, a few KiB per event
	shareJobs      = 10  // 1%: jobs are small and short lived
	shareDLQ       = 20  // 2%
	shareKV        = 10  // 1% per bucket, 11 buckets: 11% (records keep 8 revisions)
	// kvBuckets is how many KV buckets Provision creates.
	kvBuckets = 11
)

// DefaultJobsMaxMsgs is Limits.JobsMaxMsgs's default: far more jobs
// than any campaign queues at once, few enough that a runaway producer
// is stopped before the queue is the problem.
const DefaultJobsMaxMsgs = 100_000

// WithDefaults returns l with every zero field set: Volume to
// DefaultVolume, each limit to its share of Volume.
func (l Limits) WithDefaults() Limits {
	if l.Volume <= 0 {
		l.Volume = DefaultVolume
	}
	share := func(v *int64, thousandths int64) {
		if *v <= 0 {
			*v = l.Volume / 1000 * thousandths
		}
	}
	share(&l.UploadsMaxBytes, shareUploads)
	share(&l.ArtifactsMaxBytes, shareArtifacts)
	share(&l.ArenaMaxBytes, shareArena)
	share(&l.JobsMaxBytes, shareJobs)
	share(&l.DLQMaxBytes, shareDLQ)
	share(&l.KVMaxBytes, shareKV)
	if l.JobsMaxMsgs <= 0 {
		l.JobsMaxMsgs = DefaultJobsMaxMsgs
	}
	if l.UploadsMaxAge <= 0 {
		l.UploadsMaxAge = DefaultUploadsMaxAge
	}
	return l
}

// Total is the bytes the limits reserve on each node: what the server's
// max_file_store must at least be.
func (l Limits) Total() int64 {
	l = l.WithDefaults()
	return l.ArenaMaxBytes + l.JobsMaxBytes + l.DLQMaxBytes + kvBuckets*l.KVMaxBytes + l.UploadsMaxBytes + l.ArtifactsMaxBytes
}

// ErrLimits marks limits that cannot be provisioned as given.
var ErrLimits = errors.New("bus: JetStream limits do not fit")

// Validate reports limits whose sum exceeds their Volume: JetStream
// would refuse to provision them.
func (l Limits) Validate() error {
	l = l.WithDefaults()
	if t := l.Total(); t > l.Volume {
		return fmt.Errorf("%w: the streams, buckets and object stores reserve %d bytes per node, more than the volume's %d (raise --js-volume or lower a limit)", ErrLimits, t, l.Volume)
	}
	return nil
}

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
	t.Limits = t.Limits.WithDefaults()
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
			// The event log is the arena's source of truth: when it is
			// full a new fact is refused (its publisher sees
			// ErrStoreFull and retries, the stage stalls and says so),
			// never an old fact silently dropped. No MaxAge for the
			// same reason.
			MaxBytes: t.Limits.ArenaMaxBytes,
			Discard:  jetstream.DiscardNew,
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
			// A work queue removes a job once a runner acks it, so it
			// holds only the jobs waiting: a full queue refuses a new
			// job (the job stage retries it later), never drops one
			// that waits.
			MaxBytes: t.Limits.JobsMaxBytes,
			MaxMsgs:  t.Limits.JobsMaxMsgs,
			Discard:  jetstream.DiscardNew,
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
			// Poison messages are kept for an operator to read; when
			// they fill their share the oldest go first, so that a
			// storm of poison never stops a consumer from
			// dead-lettering the next one.
			MaxBytes: t.Limits.DLQMaxBytes,
			Discard:  jetstream.DiscardOld,
		},
	}
}

// Provision creates or updates the streams, KV buckets and object stores. It
// is idempotent: every service calls it at start, and a second call changes
// nothing.
//
// Every stream, bucket and object store is bounded (t.Limits): limits
// that do not fit their volume are refused (ErrLimits) before anything is
// created. A limit the operator changed is applied to the existing
// stream in place; its messages are kept (a limit lowered below what a
// DiscardNew stream holds refuses new messages until it is freed).
func Provision(ctx context.Context, js jetstream.JetStream, t Topology) error {
	t = t.withDefaults()
	if err := t.Limits.Validate(); err != nil {
		return err
	}
	lim := t.Limits
	for _, sc := range t.StreamConfigs() {
		if err := placed(ctx, func() error { _, err := js.CreateOrUpdateStream(ctx, sc); return err }); err != nil {
			return fmt.Errorf("bus: provision stream %s: %w", sc.Name, err)
		}
	}
	// A KV bucket keeps its history as before and refuses a put once it
	// holds KVMaxBytes (nats.go makes its stream DiscardNew): a record is
	// never lost to make room.
	for _, kv := range []jetstream.KeyValueConfig{
		{Bucket: BucketSubmissions, Description: "submission records", History: 8, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketRounds, Description: "round state", History: 8, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketBundles, Description: "bundle digest to its first submission", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketReferences, Description: "the runner's BF16 reference measurements per pod and campaign", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketQualityReferences, Description: "quality BF16 reference rows per campaign and suite version", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketRoundViews, Description: "rounds as people see them, projected from round events", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketScoreInputs, Description: "stage outcomes joined per submission for its score", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketParticipants, Description: "participants, operators and their API tokens (hashed)", History: 4, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketUsage, Description: "each participant's submissions and GPU-hours within its quota windows", History: 1, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketCampaigns, Description: "each task's campaign: its current version and the versions before it", History: CampaignsHistory, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
		{Bucket: BucketPods, Description: "the runners: pod, GPU and what each runs now; an entry lapses a TTL after its last heartbeat", History: 1, TTL: t.PodsTTL, Storage: jetstream.FileStorage, Replicas: t.Replicas, MaxBytes: lim.KVMaxBytes},
	} {
		if err := placed(ctx, func() error { _, err := js.CreateOrUpdateKeyValue(ctx, kv); return err }); err != nil {
			return fmt.Errorf("bus: provision KV bucket %s: %w", kv.Bucket, err)
		}
	}
	for _, os := range []jetstream.ObjectStoreConfig{
		// An upload is deleted by the build once its outcome is
		// published; one still there after UploadsMaxAge was never
		// built (its submission.received was lost, or the arena was
		// down that long), and its TTL drops it.
		{Bucket: ObjectUploads, Description: "bundles as uploaded", Storage: jetstream.FileStorage, Replicas: t.Replicas,
			MaxBytes: lim.UploadsMaxBytes, TTL: lim.UploadsMaxAge},
		// Accepted bundles have no TTL: a live submission's artifact
		// is read for as long as its record is (rescoring, a new
		// round). `arena gc` collects those nothing needs.
		{Bucket: ObjectArtifacts, Description: "bundles the build stage accepted", Storage: jetstream.FileStorage, Replicas: t.Replicas,
			MaxBytes: lim.ArtifactsMaxBytes},
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
