package access_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

var update = flag.Bool("update", false, "rewrite deploy/nats/auth.conf and the table of docs/operators/security.md from the permission table")

// owners is who may publish each event type, written out by hand from
// the issue ("only the score service may publish score.*", "only the
// runner runner.job.* outcomes") and the docs, independently of the
// table's own grants.
var owners = map[events.Type][]string{
	events.SubmissionReceived: {access.Gateway, access.Operator},
	events.BuildStarted:       {access.Build}, events.BuildCompleted: {access.Build}, events.BuildFailed: {access.Build},
	events.ContractStarted: {access.Contract}, events.ContractCompleted: {access.Contract}, events.ContractFailed: {access.Contract},
	events.QualityStarted: {access.Quality}, events.QualityCompleted: {access.Quality}, events.QualityFailed: {access.Quality},
	events.EfficiencyStarted: {access.Efficiency}, events.EfficiencyCompleted: {access.Efficiency}, events.EfficiencyFailed: {access.Efficiency},
	events.ScoreStarted: {access.Score}, events.ScoreCompleted: {access.Score}, events.ScoreFailed: {access.Score}, events.ScoreSkipped: {access.Score},
	events.RunnerJobStarted: {access.Runner}, events.RunnerJobProgress: {access.Runner},
	events.RunnerJobCompleted: {access.Runner}, events.RunnerJobFailed: {access.Runner},
	events.RoundStarted: {access.Round}, events.RoundStep: {access.Round}, events.RoundCompleted: {access.Round}, events.RoundFailed: {access.Round},
}

// jobOwners is who queues each job kind.
var jobOwners = map[string]string{events.JobQuality: access.Quality, events.JobEfficiency: access.Efficiency, events.JobSLA: access.Round}

// bucketOwners is the list of owners in docs/developers/architecture.md:
// the one user that writes each KV bucket.
var bucketOwners = map[string]string{
	bus.BucketSubmissions: access.Gateway, bus.BucketRoundViews: access.Gateway, bus.BucketBundles: access.Build,
	bus.BucketQualityReferences: access.Quality, bus.BucketReferences: access.Runner, bus.BucketScoreInputs: access.Score,
	bus.BucketRounds: access.Round, bus.BucketParticipants: access.Gateway, bus.BucketUsage: access.Gateway,
	bus.BucketPods: access.Runner, bus.BucketCampaigns: access.Operator,
}

// subjectOf is the subject an event of type t about id is published to
// (job outcomes of kind).
func subjectOf(t *testing.T, typ events.Type, kind, id string) string {
	t.Helper()
	s, ok := events.Lookup(typ)
	require.True(t, ok)
	if s.KindInSubject {
		subj, err := events.JobOutcomeSubject(typ, kind, id)
		require.NoError(t, err)
		return subj
	}
	subj, err := events.Subject(typ, id)
	require.NoError(t, err)
	return subj
}

func TestOnlyItsOwnersPublishAnEvent(t *testing.T) {
	for _, spec := range events.Catalogue {
		if spec.Stream == events.StreamRunnerJobs {
			continue // job requests: by kind, below
		}
		want, ok := owners[spec.Type]
		require.True(t, ok, "%s has no owner in this test: who publishes it?", spec.Type)
		subject := subjectOf(t, spec.Type, events.JobQuality, "s1")
		var got []string
		for _, u := range access.Users {
			if u.Permissions().Allows(subject) {
				got = append(got, u.Name)
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		require.Equal(t, want, got, "who may publish %s (%s)", spec.Type, subject)
	}
	for kind, owner := range jobOwners {
		for _, pod := range []string{"", "pod-a"} { // shared, and pinned to a pod
			subject, err := events.PinnedJobSubject(kind, "j1", pod)
			require.NoError(t, err)
			for _, u := range access.Users {
				require.Equal(t, u.Name == owner, u.Permissions().Allows(subject), "%s on %s", u.Name, subject)
			}
		}
	}
	// An unknown kind's jobs are nobody's to queue.
	for _, u := range access.Users {
		require.False(t, u.Permissions().Allows("jobs.mine.j1"), u.Name)
	}
}

func TestEachBucketHasOneWriter(t *testing.T) {
	for bucket, owner := range bucketOwners {
		key := "$KV." + bucket + ".pod-0.some-key"
		for _, u := range access.Users {
			require.Equal(t, u.Name == owner, u.Permissions().Allows(key), "%s writing %s", u.Name, key)
			// Nobody purges a bucket's stream or deletes it.
			require.False(t, u.Permissions().Allows("$JS.API.STREAM.PURGE."+access.KVStream(bucket)), u.Name)
			require.False(t, u.Permissions().Allows("$JS.API.STREAM.DELETE."+access.KVStream(bucket)), u.Name)
		}
	}
	// A grant narrowed to some keys reads those keys only: the runner
	// reads the rounds bucket's pod leases, not the rounds.
	r, _ := access.Lookup(access.Runner)
	require.True(t, r.Permissions().Allows("$JS.API.DIRECT.GET.KV_rounds.$KV.rounds.pod.pod-0"))
	require.False(t, r.Permissions().Allows("$JS.API.DIRECT.GET.KV_rounds.$KV.rounds.round.r1"))
	require.True(t, r.Permissions().Allows("$JS.API.CONSUMER.CREATE.KV_rounds.Xy12.$KV.rounds.pod.*"))
	require.False(t, r.Permissions().Allows("$JS.API.CONSUMER.CREATE.KV_rounds.Xy12.$KV.rounds.>"))
	// The round service reads the pods registry (a round starts only on a
	// pod a live runner serves) and writes none of it.
	rd, _ := access.Lookup(access.Round)
	require.True(t, rd.Permissions().Allows("$JS.API.DIRECT.GET.KV_pods.$KV.pods.gpu-node-1.runner-0"))
	require.True(t, rd.Permissions().Allows("$JS.API.CONSUMER.CREATE.KV_pods.Xy12.$KV.pods.>"))
	require.False(t, rd.Permissions().Allows("$KV.pods.gpu-node-1.runner-0"))
	// The stages that need campaigns watch the campaigns bucket and read
	// the campaigns' files; the others do not see them.
	for _, u := range access.Users {
		reads := slices.Contains([]string{access.Build, access.Contract, access.Quality, access.Efficiency, access.Round, access.Operator}, u.Name)
		p := u.Permissions()
		require.Equal(t, reads, p.Allows("$JS.API.CONSUMER.CREATE.KV_campaigns.Xy12.$KV.campaigns.>"), "%s watching the campaigns", u.Name)
		require.Equal(t, reads, p.Allows("$JS.API.DIRECT.GET.KV_campaigns.$KV.campaigns.qwen3-8b"), "%s reading a campaign", u.Name)
		if reads {
			require.True(t, p.Allows("$JS.API.DIRECT.GET.OBJ_artifacts.$O.artifacts.M.abc"), "%s reading a campaign's files", u.Name)
		}
	}
}

func TestObjectStores(t *testing.T) {
	writers := map[string][]string{
		// The build deletes an upload once built; the operator's
		// arena gc deletes the artifacts nothing needs.
		bus.ObjectUploads: {access.Gateway, access.Build, access.Operator},
		// The operator pushes campaigns' files (arena campaign push).
		bus.ObjectArtifacts: {access.Build, access.Quality, access.Efficiency, access.Round, access.Operator},
	}
	readers := map[string][]string{
		bus.ObjectUploads: {access.Gateway, access.Build, access.Operator},
		// The gateway serves an engine patch's text (GET
		// /v1/submissions/{id}/patch).
		bus.ObjectArtifacts: {access.Gateway, access.Build, access.Contract, access.Quality, access.Efficiency, access.Round, access.Runner, access.Operator},
	}
	for store, want := range writers {
		for _, u := range access.Users {
			p := u.Permissions()
			require.Equal(t, slices.Contains(want, u.Name), p.Allows("$O."+store+".C.chunk1"), "%s writing %s", u.Name, store)
			require.Equal(t, slices.Contains(readers[store], u.Name),
				p.Allows("$JS.API.CONSUMER.CREATE."+access.ObjectStream(store)+".abc.$O."+store+".C.chunk1"), "%s reading %s", u.Name, store)
		}
	}
}

func TestConsumersAreHeldToTheirNameAndFilter(t *testing.T) {
	for _, u := range access.Users {
		p := u.Permissions()
		for _, c := range u.Consumers {
			if c.PerPod {
				// A pod's durable, as the runner of pod-a names it.
				name, filter := "runner-pod-a", events.JobPodFilter("pod-a")
				require.True(t, p.Allows("$JS.API.CONSUMER.CREATE."+c.Stream+"."+name+"."+filter), "%s creates %s", u.Name, name)
				require.False(t, p.Allows("$JS.API.CONSUMER.CREATE."+c.Stream+"."+name+"."+events.SubjectRootJobs+".>"), "%s: a pod's durable over every job", u.Name)
				require.False(t, p.Allows("$JS.API.CONSUMER.CREATE."+c.Stream+"."+name), "%s: a pod's durable unfiltered", u.Name)
				require.False(t, p.Allows("$JS.API.CONSUMER.CREATE."+events.StreamArena+"."+name+".arena.>"), "%s: a durable on another stream", u.Name)
				require.True(t, p.Allows("$JS.API.CONSUMER.MSG.NEXT."+c.Stream+"."+name))
				require.True(t, p.Allows("$JS.ACK."+c.Stream+"."+name+".1.2.3.4.5.6.7"))
				require.True(t, p.Allows("dlq."+c.DeadLetterAs))
				require.False(t, p.Allows("dlq."+name), "%s: dead letters under its role's name only", u.Name)
				continue
			}
			// The subject nats.go (jetstream, v1.56) sends a create to.
			create := "$JS.API.CONSUMER.CREATE." + c.Stream + "." + c.Name
			if len(c.Filters) == 1 {
				create += "." + c.Filters[0]
				require.False(t, p.Allows("$JS.API.CONSUMER.CREATE."+c.Stream+"."+c.Name+".dlq.>"), "%s: its durable with another filter", c.Name)
				require.False(t, p.Allows("$JS.API.CONSUMER.CREATE."+c.Stream+"."+c.Name), "%s: its durable unfiltered", c.Name)
			}
			require.True(t, p.Allows(create), "%s creates %s", u.Name, create)
			require.True(t, p.Allows("$JS.API.CONSUMER.MSG.NEXT."+c.Stream+"."+c.Name))
			require.True(t, p.Allows("$JS.ACK."+c.Stream+"."+c.Name+".1.2.3.4.5.6.7"))
			require.True(t, p.Allows("dlq."+c.Name))
		}
		if u.Operates {
			continue
		}
		// No durable of another name, and no other durable's messages.
		require.False(t, p.Allows("$JS.API.CONSUMER.CREATE.ARENA.spy"), u.Name)
		require.False(t, p.Allows("$JS.API.CONSUMER.CREATE.ARENA.spy.arena.>"), u.Name)
		for _, other := range access.Users {
			for _, c := range other.Consumers {
				if other.Name == u.Name {
					continue
				}
				require.False(t, p.Allows("$JS.API.CONSUMER.MSG.NEXT."+c.Stream+"."+c.Name), "%s pulling %s's %s", u.Name, other.Name, c.Name)
				require.False(t, p.Allows("$JS.ACK."+c.Stream+"."+c.Name+".1.2.3.4.5.6.7"), "%s acking for %s", u.Name, c.Name)
				require.False(t, p.Allows("$JS.API.CONSUMER.DELETE."+c.Stream+"."+c.Name), "%s deleting %s", u.Name, c.Name)
			}
		}
	}
}

func TestInboxesAreTheirOwn(t *testing.T) {
	for _, u := range access.Users {
		p := u.Permissions()
		for _, other := range access.Users {
			// The operator is trusted, and its tools use any inbox.
			require.Equal(t, u.Name == other.Name || u.Operates, p.MaySubscribe(access.InboxPrefix(other.Name)+".abc.1"), "%s reading %s's replies", u.Name, other.Name)
		}
		require.Equal(t, u.Operates, p.MaySubscribe("_INBOX.abc"), "%s: nats.go's default inboxes", u.Name)
		require.False(t, p.Allows("_INBOX.abc"), "%s publishing to an inbox: only replies to requests it received", u.Name)
		require.Equal(t, u.Operates, p.MaySubscribe("arena.score.completed.s1"), "%s seeing events as they flow", u.Name)
	}
}

func TestServicesAndCalls(t *testing.T) {
	sc, _ := access.Lookup(access.Score)
	rd, _ := access.Lookup(access.Round)
	op, _ := access.Lookup(access.Operator)
	ct, _ := access.Lookup(access.Contract)
	require.True(t, sc.Permissions().Responses)
	require.True(t, sc.Permissions().MaySubscribe("lowbarena.ctl.leaderboard"))
	require.True(t, sc.Permissions().MaySubscribe("$SRV.PING.score"))
	require.False(t, sc.Permissions().MaySubscribe("lowbarena.ctl.round.start"))
	require.True(t, rd.Permissions().Allows("lowbarena.ctl.score.standing"))
	require.False(t, rd.Permissions().Allows("lowbarena.ctl.rescore"), "round asks for standings only")
	require.True(t, op.Permissions().Allows("lowbarena.ctl.rescore"))
	require.True(t, op.Permissions().Allows("$SRV.PING"))
	require.False(t, ct.Permissions().Allows("lowbarena.ctl.rescore"))
	require.False(t, ct.Permissions().Responses)
	for _, u := range access.Users {
		require.Equal(t, u.Operates, u.Permissions().Allows("$JS.API.STREAM.CREATE.ARENA"), "%s creating streams", u.Name)
		require.False(t, u.Permissions().Allows("$JS.API.STREAM.DELETE.ARENA"), "%s deleting the event log", u.Name)
		require.False(t, u.Permissions().Allows("$JS.API.STREAM.PURGE.ARENA"), "%s purging the event log", u.Name)
	}
}

// The streams an arena provisions are exactly those the table knows:
// a bucket added to the topology needs its owner here.
func TestStreamsAreTheProvisionedOnes(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	names := b.JetStream().StreamNames(ctx)
	for n := range names.Name() {
		got = append(got, n)
	}
	require.NoError(t, names.Err())
	want := append([]string(nil), access.Streams...)
	sort.Strings(got)
	sort.Strings(want)
	require.Equal(t, want, got)
	for _, s := range got {
		if name, ok := strings.CutPrefix(s, "KV_"); ok {
			require.Contains(t, bucketOwners, name, "bucket %s has no owner", name)
		}
	}
}

func TestDeployConfig(t *testing.T) {
	const path = "../../deploy/nats/auth.conf"
	got := access.DeployConfig()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), got, "deploy/nats/auth.conf is not the table's: run go test ./access -run TestDeployConfig -update")

	// The cluster's configuration, as docker-compose runs it, parses
	// with this auth.conf, and gives every user the table's permissions.
	creds, err := access.LoadOrCreate(t.TempDir())
	require.NoError(t, err)
	for _, u := range access.Users {
		t.Setenv(access.EnvPublicKey(u.Name), creds.Public(u.Name))
	}
	t.Setenv("NATS_NAME", "nats-1")
	opts, err := server.ProcessConfigFile("../../deploy/nats/cluster.conf")
	require.NoError(t, err)
	require.Len(t, opts.Nkeys, len(access.Users))
	for _, u := range access.Users {
		i := slices.IndexFunc(opts.Nkeys, func(n *server.NkeyUser) bool { return n.Nkey == creds.Public(u.Name) })
		require.GreaterOrEqual(t, i, 0, "user %s", u.Name)
		nu := opts.Nkeys[i]
		p := u.Permissions()
		require.Equal(t, access.Account, nu.Account.Name)
		require.Equal(t, p.Publish, nu.Permissions.Publish.Allow, u.Name)
		require.Equal(t, p.Subscribe, nu.Permissions.Subscribe.Allow, u.Name)
		require.Equal(t, p.Responses, nu.Permissions.Response != nil, u.Name)
	}
	t.Setenv(access.EnvPublicKey(access.Score), "")
	_, err = server.ProcessConfigFile("../../deploy/nats/cluster.conf")
	require.Error(t, err, "a missing key is an error at the server's start, not a user without a key")
}

// TestDocsTable holds the users' table of the operators' security page
// (docs/operators/security.md) to the permission table.
func TestDocsTable(t *testing.T) {
	const path = "../../docs/operators/security.md"
	const begin, end = "<!-- access table: begin -->\n", "<!-- access table: end -->"
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	s := string(raw)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	require.True(t, i >= 0 && j > i, "docs/operators/security.md has the markers of the users' table")
	if *update {
		s = s[:i+len(begin)] + access.Markdown() + s[j:]
		require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
		j = strings.Index(s, end)
	}
	require.Equal(t, access.Markdown(), s[i+len(begin):j], "the table of docs/operators/security.md is not the table's: run go test ./platform/access -run TestDocsTable -update")
}

func TestCredentials(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "credentials")
	c, err := access.LoadOrCreate(dir)
	require.NoError(t, err)
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	seen := map[string]bool{}
	for _, u := range access.Names() {
		st, err := os.Stat(c.SeedFile(u))
		require.NoError(t, err)
		require.Equal(t, access.SeedFileMode, st.Mode().Perm(), u)
		raw, err := os.ReadFile(c.SeedFile(u))
		require.NoError(t, err)
		kp, err := nkeys.ParseDecoratedNKey(raw)
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		require.Equal(t, c.Public(u), pub, "the file's seed is the key the server is given")
		require.True(t, nkeys.IsValidPublicUserKey(pub))
		require.False(t, seen[pub], "every user has its own key")
		seen[pub] = true
	}

	// Kept across restarts; a widened mode is narrowed.
	require.NoError(t, os.Chmod(c.SeedFile(access.Score), 0o644))
	again, err := access.LoadOrCreate(dir)
	require.NoError(t, err)
	for _, u := range access.Names() {
		require.Equal(t, c.Public(u), again.Public(u), u)
	}
	st, err = os.Stat(c.SeedFile(access.Score))
	require.NoError(t, err)
	require.Equal(t, access.SeedFileMode, st.Mode().Perm())

	// A lost seed is made anew for its user only.
	require.NoError(t, os.Remove(c.SeedFile(access.Runner)))
	third, err := access.LoadOrCreate(dir)
	require.NoError(t, err)
	require.NotEqual(t, c.Public(access.Runner), third.Public(access.Runner))
	require.Equal(t, c.Public(access.Gateway), third.Public(access.Gateway))

	// A file that holds no seed is refused and left as it is.
	require.NoError(t, os.WriteFile(c.SeedFile(access.Build), []byte("not a seed\n"), 0o600))
	_, err = access.LoadOrCreate(dir)
	require.ErrorIs(t, err, access.ErrBadSeedFile)
	raw, err := os.ReadFile(c.SeedFile(access.Build))
	require.NoError(t, err)
	require.Equal(t, "not a seed\n", string(raw))
}

func TestEnvFiles(t *testing.T) {
	c, err := access.LoadOrCreate(t.TempDir())
	require.NoError(t, err)
	files, err := c.WriteEnvFiles("LOWBARENA_NATS_NKEY")
	require.NoError(t, err)
	require.Len(t, files, len(access.Users)+1)
	pubs, err := os.ReadFile(filepath.Join(c.Dir, "nats.env"))
	require.NoError(t, err)
	for _, u := range access.Names() {
		require.Contains(t, string(pubs), access.EnvPublicKey(u)+"="+c.Public(u)+"\n")
		path := filepath.Join(c.Dir, u+".env")
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, access.SeedFileMode, st.Mode().Perm())
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		line := strings.TrimSpace(raw2line(string(raw), "LOWBARENA_NATS_NKEY="))
		kp, err := access.ParseSeed([]byte(line))
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		require.Equal(t, c.Public(u), pub, u)
	}
}

func raw2line(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return v
		}
	}
	return ""
}
