// Package access is who may do what on the arena's NATS: one user per
// service and one for the operator, each with the subjects it may publish
// and subscribe to, written once here as data beside the event catalogue
// and turned into nats-server permissions for the embedded server (package
// enforce), the cluster's configuration (deploy/nats/auth.conf) and the
// table in docs/operators/security.md.
//
// A user's grants are named in the arena's terms (the event types it
// publishes, its durable consumers, the buckets it reads or writes, the
// requests it serves or sends); Permissions expands them into the NATS
// and JetStream API subjects a client touches to do exactly that. The
// server refuses everything else: the lists are allow lists, and a
// subject on none of them is denied.
//
// Participants have no NATS user: they reach the arena through the
// gateway's HTTP API. Viewers read what the gateway serves.
package access

import (
	"fmt"
	"slices"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// User names: one per service (the service's name, as its component and
// event source name it) and the operator, whose user the CLI and `arena
// up` itself connect as.
const (
	Gateway    = "gateway"
	Build      = "build"
	Contract   = "contract"
	Quality    = "quality"
	Efficiency = "efficiency"
	Score      = "score"
	Round      = "round"
	Runner     = "runner"
	Operator   = "operator"
)

// Mode is what a user may do with a bucket.
type Mode int

// Modes. Write implies Read.
const (
	Read Mode = iota + 1
	Write
)

func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Bucket is a KV bucket or object store a user reads or writes.
type Bucket struct {
	// Name is the bucket's name (bus.Bucket*, bus.Object*).
	Name string
	// Mode is read, or write (put, create, update, delete; for an object
	// store also the purge that replacing or deleting an object needs).
	Mode Mode
	// Keys narrows a KV grant to the keys under a prefix, as a subject
	// filter over the key ("pod.*"); empty means every key.
	Keys string
}

// Consumer is a durable pull consumer a user creates and pulls from.
type Consumer struct {
	// Stream is the stream it consumes (events.Stream*).
	Stream string
	// Name is the durable's name.
	Name string
	// Filters are the durable's subject filters, as the service declares
	// them. With exactly one, the server holds the durable to it (the
	// filter is part of the create request's subject); with several,
	// only to its name.
	Filters []string
	// PerPod marks a durable named per pod (the runner's runner-<pod>):
	// any name on its stream, held to its filter (one token per wildcard
	// of Filters[0]), dead-lettering under DeadLetterAs. NATS wildcards
	// match whole tokens, so "runner-*" cannot be a permission; the
	// runner user is the only consumer of RUNNER_JOBS.
	PerPod bool
	// DeadLetterAs is the dead-letter subject's last token of a PerPod
	// durable (dlq.<DeadLetterAs>).
	DeadLetterAs string
}

// Service is a nats.go/micro service a user runs: its name (for $SRV
// discovery) and the request subjects it answers.
type Service struct {
	Name     string
	Subjects []string
}

// User is one NATS user of the arena and everything it may do.
type User struct {
	// Name is the user's name (a service's, or Operator).
	Name string
	// Role says in a few words who connects as this user (docs/operators/security.md).
	Role string
	// Publishes are the event types it publishes on the ARENA stream.
	Publishes []events.Type
	// Jobs are the job kinds it queues on RUNNER_JOBS (jobs.<kind>.<id>).
	Jobs []string
	// Consumers are its durable consumers; each may dead-letter to
	// dlq.<name>.
	Consumers []Consumer
	// KV and Objects are the buckets and object stores it uses.
	KV      []Bucket
	Objects []Bucket
	// Serves are the micro services it answers.
	Serves []Service
	// Calls are the request subjects it sends (platform/ctl).
	Calls []string
	// ReadsEvents says it reads the ARENA stream by subject (score reads
	// a submission's submission.received back, a runner a job's outcome).
	ReadsEvents bool
	// ReadsJobs says it reads the RUNNER_JOBS stream by subject (a runner
	// looks up a submission's queued quality job to answer it on the
	// engine the submission's efficiency job holds).
	ReadsJobs bool
	// Operates grants what an operator does beyond the grants above: read
	// every stream, bucket and object store of the arena through
	// consumers of its own (arena watch, show, the nats CLI), list,
	// inspect, ack and delete the streams' consumers, watch events as
	// they flow (core subscriptions on arena.>), ask any service ($SRV.>,
	// lowbarena.ctl.>), provision the arena's streams, buckets and object
	// stores, and use any inbox (_INBOX.>: tools outside the arena, the
	// nats CLI and the CloudEvents SDK, use nats.go's default inboxes).
	// Operators are trusted; a service's user has none of this.
	Operates bool
}

// Users is the permission table: every NATS user of the arena. Each KV
// bucket has one writer (its owner, as docs/operators/security.md lists them); an
// object store may have several (uploads: whoever takes a submission in;
// artifacts: content addressed, every file checked against its digest by
// its readers).
var Users = []User{
	{
		Name: Gateway, Role: "the gateway: records, round views, the HTTP API",
		// The gateway takes submissions over HTTP: it stores the upload
		// and announces it, as `arena submit` does as the operator.
		Publishes: []events.Type{events.SubmissionReceived},
		Consumers: []Consumer{
			{Stream: events.StreamArena, Name: "gateway-records", Filters: []string{events.SubjectRootArena + ".>"}},
			{Stream: events.StreamArena, Name: "gateway-rounds", Filters: []string{events.SubjectRootArena + ".round.>"}},
			// The quota ledgers charge the runner's GPU-hours.
			{Stream: events.StreamArena, Name: "gateway-usage", Filters: []string{events.FilterFor(events.RunnerJobCompleted), events.FilterFor(events.RunnerJobFailed)}},
		},
		KV: []Bucket{{Name: bus.BucketSubmissions, Mode: Write}, {Name: bus.BucketRoundViews, Mode: Write},
			{Name: bus.BucketParticipants, Mode: Write}, {Name: bus.BucketUsage, Mode: Write},
			// GET /v1/pods: the registry and the pods' leases.
			{Name: bus.BucketPods, Mode: Read}, {Name: bus.BucketRounds, Mode: Read, Keys: "pod.*"}},
		// GET /v1/submissions/{id}/patch reads an engine patch's text
		// from the artifacts, by the digest its record names.
		Objects: []Bucket{{Name: bus.ObjectUploads, Mode: Write}, {Name: bus.ObjectArtifacts, Mode: Read}},
		Serves: []Service{{Name: ctl.ServiceGateway, Subjects: []string{ctl.SubjectParticipantAdd, ctl.SubjectParticipantToken,
			ctl.SubjectParticipantList, ctl.SubjectParticipantRevoke}}},
		// The HTTP API's leaderboard and history, and its operators'
		// read-only SQL (POST /v1/sql, the query service's).
		Calls: []string{ctl.SubjectLeaderboard, ctl.SubjectHistory, ctl.SubjectSQL},
		// A stage event that overtakes its submission.received (the
		// gateway that held the received died with it unsettled) is
		// folded onto the received read back from the stream.
		ReadsEvents: true,
	},
	{
		Name: Build, Role: "the build stage",
		Publishes: stageTypes("build"),
		Consumers: []Consumer{{Stream: events.StreamArena, Name: "build", Filters: []string{events.Submission.Received.Filter()}}},
		// The campaigns, watched: a bundle's engine patch is checked
		// against its campaign's pinned engine source, whose files are
		// in the artifact store.
		KV: []Bucket{{Name: bus.BucketBundles, Mode: Write}, {Name: bus.BucketCampaigns, Mode: Read}},
		// It deletes an upload once the build's outcome is published.
		Objects: []Bucket{{Name: bus.ObjectUploads, Mode: Write}, {Name: bus.ObjectArtifacts, Mode: Write}},
		// A redelivered submission.received whose build outcome ARENA
		// holds is acked, not built again from a deleted upload.
		ReadsEvents: true,
	},
	{
		Name: Contract, Role: "the contract stage",
		Publishes: stageTypes("contract"),
		Consumers: []Consumer{{Stream: events.StreamArena, Name: "contract", Filters: []string{events.Build.Completed.Filter()}}},
		// The campaigns it checks against, watched; their files are
		// in the artifact store.
		KV:      []Bucket{{Name: bus.BucketCampaigns, Mode: Read}},
		Objects: []Bucket{{Name: bus.ObjectArtifacts, Mode: Read}},
	},
	{
		Name: Quality, Role: "the quality stage",
		Publishes: stageTypes("quality"),
		Jobs:      []string{events.JobQuality},
		Consumers: []Consumer{
			{Stream: events.StreamArena, Name: "quality", Filters: []string{events.Contract.Completed.Filter()}},
			{Stream: events.StreamArena, Name: "quality-results", Filters: events.JobOutcomeFilters(events.JobQuality)},
		},
		KV: []Bucket{{Name: bus.BucketQualityReferences, Mode: Write}, {Name: bus.BucketCampaigns, Mode: Read}},
		// The campaign's suite and BF16 reference go to the artifact
		// store for the runner.
		Objects: []Bucket{{Name: bus.ObjectArtifacts, Mode: Write}},
	},
	{
		Name: Efficiency, Role: "the efficiency stage",
		Publishes: stageTypes("efficiency"),
		Jobs:      []string{events.JobEfficiency},
		Consumers: []Consumer{
			{Stream: events.StreamArena, Name: "efficiency", Filters: []string{events.Contract.Completed.Filter()}},
			{Stream: events.StreamArena, Name: "efficiency-results", Filters: events.JobOutcomeFilters(events.JobEfficiency)},
		},
		KV:      []Bucket{{Name: bus.BucketCampaigns, Mode: Read}},
		Objects: []Bucket{{Name: bus.ObjectArtifacts, Mode: Write}},
		// The engine audits wait for the submission's quality outcome,
		// read back from the stream.
		ReadsEvents: true,
	},
	{
		Name: Score, Role: "the score stage, leaderboard, history and read-only SQL",
		Publishes: stageTypes("score"),
		Consumers: []Consumer{{Stream: events.StreamArena, Name: "score", Filters: []string{events.Contract.Completed.Filter(),
			events.Quality.Completed.Filter(), events.Efficiency.Completed.Filter(), events.Submission.Received.Filter()}}},
		KV: []Bucket{{Name: bus.BucketScoreInputs, Mode: Write}},
		Serves: []Service{{Name: ctl.ServiceScore, Subjects: []string{ctl.SubjectLeaderboard, ctl.SubjectHistory, ctl.SubjectRescore, ctl.SubjectStanding}},
			// It holds the store wherever the arena runs (`arena sql`).
			{Name: ctl.ServiceQuery, Subjects: []string{ctl.SubjectSQL}}},
		ReadsEvents: true,
	},
	{
		Name: Round, Role: "rounds",
		Publishes: []events.Type{events.RoundStarted, events.RoundStep, events.RoundCompleted, events.RoundFailed},
		Jobs:      []string{events.JobSLA},
		Consumers: []Consumer{{Stream: events.StreamArena, Name: "round-jobs",
			Filters: append(events.JobOutcomeFilters(events.JobSLA), events.Job.Progress.Filter())}},
		// A round starts only on a pod a live runner serves: the pods
		// registry, read at each start.
		KV:      []Bucket{{Name: bus.BucketRounds, Mode: Write}, {Name: bus.BucketPods, Mode: Read}, {Name: bus.BucketCampaigns, Mode: Read}},
		Objects: []Bucket{{Name: bus.ObjectArtifacts, Mode: Write}},
		Serves:  []Service{{Name: ctl.ServiceRound, Subjects: []string{ctl.SubjectRoundStart, ctl.SubjectRoundList}}},
		Calls:   []string{ctl.SubjectStanding},
	},
	{
		Name: Runner, Role: "GPU runners, one per GPU",
		Publishes: []events.Type{events.RunnerJobStarted, events.RunnerJobProgress, events.RunnerJobCompleted, events.RunnerJobFailed},
		Consumers: []Consumer{{Stream: events.StreamRunnerJobs, Name: "runner", Filters: []string{events.JobSharedFilter}},
			{Stream: events.StreamRunnerJobs, Name: "runner-<pod>", Filters: []string{events.JobPodFilter("*")}, PerPod: true, DeadLetterAs: "runner"}},
		// Its entry in the pods registry, and its pod's lease (watched:
		// no shared job while a round holds the pod).
		KV: []Bucket{{Name: bus.BucketReferences, Mode: Write}, {Name: bus.BucketPods, Mode: Write},
			{Name: bus.BucketRounds, Mode: Read, Keys: "pod.*"}},
		Objects: []Bucket{{Name: bus.ObjectArtifacts, Mode: Read}},
		// A job's stored outcome, read before it runs a redelivered job
		// or gives one up (a job ends once).
		ReadsEvents: true,
		// A submission's quality job, looked up queued while its
		// efficiency job holds the candidate's engine.
		ReadsJobs: true,
	},
	{
		Name: Operator, Role: "the CLI (`arena submit`, `watch`, `show`, ...) and `arena up` itself",
		Publishes: []events.Type{events.SubmissionReceived},
		// `arena campaign push`: the campaign's files go to the
		// artifact store, its version to the campaigns bucket.
		KV: []Bucket{{Name: bus.BucketCampaigns, Mode: Write}},
		// Uploads: arena submit. Artifacts: arena gc deletes those
		// nothing needs (package gc).
		Objects:  []Bucket{{Name: bus.ObjectUploads, Mode: Write}, {Name: bus.ObjectArtifacts, Mode: Write}},
		Operates: true,
	},
}

// Lookup returns the user named name.
func Lookup(name string) (User, bool) {
	i := slices.IndexFunc(Users, func(u User) bool { return u.Name == name })
	if i < 0 {
		return User{}, false
	}
	return Users[i], true
}

// Names lists the users' names in table order.
func Names() []string {
	out := make([]string, len(Users))
	for i, u := range Users {
		out[i] = u.Name
	}
	return out
}

// Streams are the streams the arena provisions, every KV bucket's and
// object store's included: an operator provisions them, and
// nothing else may create, change or delete a stream.
var Streams = []string{
	events.StreamArena, events.StreamRunnerJobs, events.StreamDLQ,
	KVStream(bus.BucketSubmissions), KVStream(bus.BucketRounds), KVStream(bus.BucketBundles),
	KVStream(bus.BucketReferences), KVStream(bus.BucketQualityReferences), KVStream(bus.BucketRoundViews),
	KVStream(bus.BucketScoreInputs), KVStream(bus.BucketParticipants), KVStream(bus.BucketUsage), KVStream(bus.BucketPods), KVStream(bus.BucketCampaigns),
	ObjectStream(bus.ObjectUploads), ObjectStream(bus.ObjectArtifacts),
}

// KVStream is the stream that holds KV bucket b.
func KVStream(b string) string { return "KV_" + b }

// ObjectStream is the stream that holds object store b.
func ObjectStream(b string) string { return "OBJ_" + b }

// InboxPrefix is the prefix of user's reply inboxes (nats.CustomInboxPrefix):
// each user subscribes to its own inboxes only, so no user reads the
// replies another is sent.
func InboxPrefix(user string) string { return "_INBOX." + user }

// stageTypes are every catalogued event type of a stage.
func stageTypes(stage string) []events.Type {
	var out []events.Type
	for _, s := range events.Catalogue {
		if s.Stage == stage {
			out = append(out, s.Type)
		}
	}
	return out
}
