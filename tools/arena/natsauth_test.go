package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/access/enforce"
	"github.com/lowbarena/lowbarena/platform/app"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/services/build"
	"github.com/lowbarena/lowbarena/services/contract"
	"github.com/lowbarena/lowbarena/services/efficiency"
	"github.com/lowbarena/lowbarena/services/gateway"
	"github.com/lowbarena/lowbarena/services/gateway/projector"
	"github.com/lowbarena/lowbarena/services/gateway/rounds"
	gwusage "github.com/lowbarena/lowbarena/services/gateway/usage"
	"github.com/lowbarena/lowbarena/services/quality"
	"github.com/lowbarena/lowbarena/services/round"
	"github.com/lowbarena/lowbarena/services/runner"
	"github.com/lowbarena/lowbarena/services/score"
)

// The permission table names every service, and each
// service's durables as the service declares them: a service renamed,
// or a durable added or re-filtered, without its permissions would be
// refused at start.
func TestPermissionTableMatchesTheServices(t *testing.T) {
	var names []string
	for _, c := range []app.Component{gateway.Component(), build.Component(), contract.Component(), quality.Component(),
		efficiency.Component(), score.Component(), round.Component(), runner.Component()} {
		names = append(names, c.Name)
	}
	require.ElementsMatch(t, append(names, access.Operator), access.Names())

	declared := map[string][]bus.ConsumerConfig{
		build.Name:      {build.Consumer},
		contract.Name:   {contract.Consumer},
		quality.Name:    {quality.Requests, quality.Results},
		efficiency.Name: {efficiency.Requests, efficiency.Results},
		score.Name:      {score.Consumer},
		round.Name:      {(*round.Service)(nil).Consumer()},
		runner.Name:     {new(runner.Service).Consumer(), runner.PodConsumerOf(new(runner.Service).Consumer(), "pod-0")},
		gateway.Name: {{Name: projector.ConsumerName}, rounds.Consumer(),
			{Name: gwusage.TallyConsumer, Subjects: []string{events.FilterFor(events.RunnerJobCompleted), events.FilterFor(events.RunnerJobFailed)}}},
		access.Operator: nil,
	}
	for _, u := range access.Users {
		cfgs, ok := declared[u.Name]
		require.True(t, ok, u.Name)
		require.Len(t, u.Consumers, len(cfgs), "%s's durables", u.Name)
		for _, cfg := range cfgs {
			i := slices.IndexFunc(u.Consumers, func(c access.Consumer) bool { return c.Name == cfg.Name })
			if i < 0 && cfg.DeadLetterAs != "" {
				// A durable named per pod: the table holds its role, any
				// name held to its filter's shape, dead-lettering under
				// the role's name.
				i = slices.IndexFunc(u.Consumers, func(c access.Consumer) bool { return c.PerPod })
				require.GreaterOrEqual(t, i, 0, "%s's per-pod durable %s is in the table", u.Name, cfg.Name)
				c := u.Consumers[i]
				require.Equal(t, cfg.Stream, c.Stream, cfg.Name)
				require.Len(t, cfg.Subjects, 1, cfg.Name)
				require.True(t, server.SubjectMatchesFilter(cfg.Subjects[0], c.Filters[0]), "%s's filter %s within %s", cfg.Name, cfg.Subjects[0], c.Filters[0])
				require.Equal(t, cfg.DeadLetterAs, c.DeadLetterAs, cfg.Name)
				continue
			}
			require.GreaterOrEqual(t, i, 0, "%s's durable %s is in the table", u.Name, cfg.Name)
			stream := cfg.Stream
			if stream == "" {
				stream = events.StreamArena
			}
			require.Equal(t, stream, u.Consumers[i].Stream, cfg.Name)
			if cfg.Subjects != nil {
				require.Equal(t, cfg.Subjects, u.Consumers[i].Filters, cfg.Name)
			}
		}
	}
}

// testArena is a real nats-server with the permission table's users,
// their seeds in DATA/credentials as `arena up` keeps them, and the
// streams provisioned by the operator: what the CLI and the services
// meet, without the rest of `arena up`.
type testArena struct {
	url   string
	creds *access.Credentials
}

func natsArena(t *testing.T, data string) *testArena {
	t.Helper()
	creds, err := access.LoadOrCreate(credentialsDir(data))
	require.NoError(t, err)
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: filepath.Join(data, "nats"), NoLog: true, NoSigs: true}
	require.NoError(t, enforce.Configure(opts, creds))
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	a := &testArena{url: s.ClientURL(), creds: creds}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, bus.Provision(ctx, a.busAs(t, access.Operator).JetStream(), bus.Topology{}))
	return a
}

func (a *testArena) auth(user string) app.NATSAuth {
	return app.NATSAuth{CredsFile: a.creds.SeedFile(user)}
}

// busAs connects to a as user.
func (a *testArena) busAs(t *testing.T, user string) *bus.Bus {
	t.Helper()
	nc, err := app.ConnectNATS(app.NATSClient{URLs: a.url, Name: user, User: user, Auth: a.auth(user)}, nil)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	b, err := bus.New(nc)
	require.NoError(t, err)
	return b
}

// A forged score.completed published with the contract service's
// credentials is refused by the server, and the gateway's record of the
// submission is unchanged; the same event from the score service moves
// it, so "unchanged" is the refusal's doing.
func TestForgedScoreLeavesTheRecord(t *testing.T) {
	a := natsArena(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The gateway, as its own user, as `arena up` starts it.
	c := gateway.Component()
	cfg := app.DefaultConfig(c.Name)
	fs := c.FlagSet(&cfg)
	require.NoError(t, app.Set(fs, map[string]string{"http": "127.0.0.1:0"}))
	cfg.NATSURL, cfg.Store, cfg.NATSAuth, cfg.NATSTLS, cfg.Provision = a.url, "", a.auth(c.Name), app.NATSTLS{}, app.ProvisionNo
	rt, err := app.Start(ctx, cfg, app.WithLogOutput(io.Discard), app.WithoutTelemetry())
	require.NoError(t, err)
	actors, err := c.Build(ctx, rt)
	require.NoError(t, err)
	actx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunActors(actx, nil, actors...) }()
	t.Cleanup(func() { stop(); <-done; rt.Close() })

	id := bustest.SampleSubject
	emit := func(b *bus.Bus, typ events.Type, eid string) error {
		_, err := b.PublishNew(ctx, eid, typ, events.Source(b.Conn().Opts.Name), id, bustest.Sample(typ))
		return err
	}
	kv, err := a.busAs(t, access.Operator).JetStream().KeyValue(ctx, bus.BucketSubmissions)
	require.NoError(t, err)
	recordOf := func() (record.Submission, uint64) {
		e, err := kv.Get(ctx, id)
		if err != nil {
			return record.Submission{}, 0
		}
		var rec record.Submission
		require.NoError(t, json.Unmarshal(e.Value(), &rec))
		return rec, e.Revision()
	}
	status := func(rec record.Submission, stage string) string {
		for _, st := range rec.Stages {
			if st.Name == stage {
				return st.Status
			}
		}
		return ""
	}

	require.NoError(t, emit(a.busAs(t, access.Operator), events.SubmissionReceived, "received"))
	require.Eventually(t, func() bool { _, rev := recordOf(); return rev > 0 }, 30*time.Second, 20*time.Millisecond)
	contractBus := a.busAs(t, access.Contract)

	err = emit(contractBus, events.ScoreCompleted, "forged")
	require.ErrorIs(t, err, bus.ErrDenied)
	var de *bus.DeniedError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "arena.score.completed."+id, de.Subject)

	// The contract's own event, after the forgery in the stream's order:
	// once the record shows it, the gateway has folded everything before.
	require.NoError(t, emit(contractBus, events.ContractCompleted, "contract"))
	require.Eventually(t, func() bool { rec, _ := recordOf(); return status(rec, "contract") == record.StatusDone }, 30*time.Second, 20*time.Millisecond)
	rec, rev := recordOf()
	require.Equal(t, record.StatusPending, status(rec, "score"), "the forged score did not reach the record")
	require.Nil(t, rec.Result.DevScore)
	st, err := a.busAs(t, access.Operator).JetStream().Stream(ctx, events.StreamArena)
	require.NoError(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("arena.score.>"))
	require.NoError(t, err)
	require.Empty(t, info.State.Subjects, "nothing was stored on a score subject")

	// The score service's own score.completed is folded (the sample's
	// entry is not qualified: its score stage reads skipped).
	require.NoError(t, emit(a.busAs(t, access.Score), events.ScoreCompleted, "scored"))
	require.Eventually(t, func() bool { rec, _ := recordOf(); return rec.Result.DevScore != nil }, 30*time.Second, 20*time.Millisecond)
	rec, _ = recordOf()
	require.Equal(t, record.StatusSkipped, status(rec, "score"))
	_, after := recordOf()
	require.Greater(t, after, rev)
}

// The CLI connects as the operator: with the seed `arena up` keeps in
// the data folder, or the one LOWBARENA_NATS_CREDS names; without
// credentials, or with a service's, it is refused and says why.
func TestCLIFindsTheOperatorsCredentials(t *testing.T) {
	data := t.TempDir()
	a := natsArena(t, data)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range []string{app.EnvNATSCreds, app.EnvNATSNkey, app.EnvNATSUser, app.EnvNATSPassword, app.EnvNATSPasswordFile} {
		t.Setenv(k, "")
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr []string
	}{
		{"the data folder of LOWBARENA_DATA", map[string]string{EnvData: data}, nil},
		{"a seed file in LOWBARENA_NATS_CREDS", map[string]string{EnvData: t.TempDir(), app.EnvNATSCreds: a.creds.SeedFile(access.Operator)}, nil},
		{"none found", map[string]string{EnvData: filepath.Join(data, "elsewhere")},
			[]string{"nats_auth_failed", "none were found", filepath.Join(data, "elsewhere", "credentials")}},
		{"a service's", map[string]string{app.EnvNATSCreds: a.creds.SeedFile(access.Contract)},
			[]string{"permission_denied", "are not the operator's"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := dial(ctx, a.url)
			if tt.wantErr == nil {
				require.NoError(t, err)
				defer c.close()
				_, err := c.submissions(ctx)
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrArenaAuth)
			for _, w := range tt.wantErr {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// `arena credentials DIR` writes what a cluster reads: a seed per user,
// nats.env with the public keys, USER.env with each seed; run again, it
// keeps them.
func TestCredentialsVerb(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	var out, errOut strings.Builder
	require.NoError(t, run(context.Background(), []string{"credentials", dir}, &out, &errOut))
	creds, err := access.LoadOrCreate(dir)
	require.NoError(t, err)
	pubs, err := os.ReadFile(filepath.Join(dir, "nats.env"))
	require.NoError(t, err)
	for _, u := range access.Names() {
		require.Contains(t, out.String(), creds.Public(u), "the verb prints each user's public key")
		require.Contains(t, string(pubs), access.EnvPublicKey(u)+"="+creds.Public(u))
		env, err := os.ReadFile(filepath.Join(dir, u+".env"))
		require.NoError(t, err)
		require.Contains(t, string(env), app.EnvNATSNkey+"=SU")
	}
	before := out.String()
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"credentials", dir}, &out, &errOut))
	require.Equal(t, before, out.String(), "a second run keeps every key")
	err = run(context.Background(), []string{"credentials"}, &out, &errOut)
	var ee *exitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitUsage, ee.code)
}
