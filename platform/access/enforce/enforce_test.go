package enforce_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/access"
	"github.com/lowbarena/lowbarena/platform/access/enforce"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
)

// arena is a real nats-server with the permission table's users, and the
// violations its log counted.
type arena struct {
	s       *server.Server
	creds   *access.Credentials
	metrics *sdkmetric.ManualReader
}

// embedded starts a server configured as `arena up` configures its own
// (enforce.Configure, users in the global account).
func embedded(t testing.TB) *arena {
	t.Helper()
	creds, err := access.LoadOrCreate(t.TempDir())
	require.NoError(t, err)
	opts := &server.Options{ServerName: "enforce", Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	require.NoError(t, enforce.Configure(opts, creds))
	return start(t, opts, creds)
}

// deployed starts a server from deploy/nats/auth.conf, as the cluster's
// nodes read it (users in the ARENA account, public keys from the
// environment).
func deployed(t *testing.T) *arena {
	t.Helper()
	creds, err := access.LoadOrCreate(t.TempDir())
	require.NoError(t, err)
	for _, u := range access.Users {
		t.Setenv(access.EnvPublicKey(u.Name), creds.Public(u.Name))
	}
	dir := t.TempDir()
	auth, err := os.ReadFile("../../../deploy/nats/auth.conf")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "auth.conf"), auth, 0o644))
	conf := fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\ninclude ./auth.conf\n", filepath.Join(dir, "js"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o644))
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	require.NoError(t, err)
	opts.NoLog, opts.NoSigs, opts.ServerName = true, true, "enforce-deploy"
	return start(t, opts, creds)
}

func start(t testing.TB, opts *server.Options, creds *access.Credentials) *arena {
	t.Helper()
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	l, err := enforce.NewLog(slog.New(slog.NewTextHandler(io.Discard, nil)), creds, sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	l.Install(s)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	a := &arena{s: s, creds: creds, metrics: reader}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, bus.Provision(ctx, jsOf(t, a.connect(t, access.Operator)), bus.Topology{}))
	return a
}

func jsOf(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// connect connects as user with its seed file, its inboxes its own.
func (a *arena) connect(t testing.TB, user string, extra ...nats.Option) *nats.Conn {
	t.Helper()
	seed, err := nats.NkeyOptionFromSeed(a.creds.SeedFile(user))
	require.NoError(t, err)
	opts := append([]nats.Option{seed, nats.CustomInboxPrefix(access.InboxPrefix(user)), nats.Name(user)}, extra...)
	nc, err := nats.Connect(a.s.ClientURL(), opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// violations sums lowbarena.nats.violations by user for op.
func (a *arena) violations(t *testing.T, op string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, a.metrics.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "lowbarena.nats.violations" {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok)
			for _, dp := range sum.DataPoints {
				if v, _ := dp.Attributes.Value("op"); v.AsString() == op {
					u, _ := dp.Attributes.Value("user")
					out[u.AsString()] += dp.Value
				}
			}
		}
	}
	return out
}

// A forged event on every event subject, with every user's credentials:
// refused by the server, except for its owners; each refusal has its
// code and is counted where the arena sees it.
func TestForgedEvents(t *testing.T) {
	for name, serve := range map[string]func(*testing.T) *arena{"embedded": func(t *testing.T) *arena { return embedded(t) }, "deploy": deployed} {
		t.Run(name, func(t *testing.T) {
			a := serve(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			denied := map[string]int64{}
			stored := map[string]uint64{}
			for _, u := range access.Users {
				b, err := bus.New(a.connect(t, u.Name))
				require.NoError(t, err)
				for _, spec := range events.Catalogue {
					kinds := []string{bustest.SampleJobKind}
					if spec.Stream == events.StreamRunnerJobs {
						kinds = []string{events.JobQuality, events.JobEfficiency, events.JobSLA}
					}
					for _, kind := range kinds {
						data := bustest.Sample(spec.Type)
						owner := slices.Contains(u.Publishes, spec.Type)
						if req, ok := data.(*events.RunnerJobRequestedData); ok {
							req.Kind = kind
							owner = slices.Contains(u.Jobs, kind)
						}
						e, err := events.NewEvent(fmt.Sprintf("forged-%s-%s-%s", u.Name, spec.Verb+spec.Noun, kind), spec.Type,
							events.Source(u.Name), bustest.SampleSubject, data)
						require.NoError(t, err)
						subject, err := bus.SubjectOf(e)
						require.NoError(t, err)
						// A deadline far past any refusal: a refusal that
						// waited it out would fail as a timeout here.
						_, err = b.Publish(ctx, e)
						if owner {
							require.NoError(t, err, "%s publishing its own %s", u.Name, subject)
							stored[spec.Stream]++
							continue
						}
						require.ErrorIs(t, err, bus.ErrDenied, "%s forging %s", u.Name, subject)
						var de *bus.DeniedError
						require.ErrorAs(t, err, &de)
						require.Equal(t, reason.PermissionDenied, de.Code())
						require.Equal(t, "publish", de.Op)
						require.Equal(t, subject, de.Subject)
						denied[u.Name]++
					}
				}
			}
			// Every user forged something, and every owner published.
			require.Len(t, denied, len(access.Users))
			require.Eventually(t, func() bool {
				got := a.violations(t, enforce.OpPublish)
				for u, n := range denied {
					if got[u] != n {
						return false
					}
				}
				return len(got) == len(denied)
			}, 10*time.Second, 20*time.Millisecond, "violations counted per user: want %v", denied)
			// Nothing forged was stored.
			js := jsOf(t, a.connect(t, access.Operator))
			for _, name := range []string{events.StreamArena, events.StreamRunnerJobs} {
				st, err := js.Stream(ctx, name)
				require.NoError(t, err)
				require.Equal(t, stored[name], st.CachedInfo().State.Msgs, name)
			}
		})
	}
}

// A service subscribing, consuming or reading outside its subjects is
// refused, and each refusal is counted.
func TestOutsideItsSubjects(t *testing.T) {
	for name, serve := range map[string]func(*testing.T) *arena{"embedded": func(t *testing.T) *arena { return embedded(t) }, "deploy": deployed} {
		t.Run(name, func(t *testing.T) {
			a := serve(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// What the owners keep, for the others to try to read.
			op := jsOf(t, a.connect(t, access.Operator))
			_, err := op.CreateOrUpdateConsumer(ctx, events.StreamArena, jetstream.ConsumerConfig{Durable: "score", AckPolicy: jetstream.AckExplicitPolicy})
			require.NoError(t, err)

			core := func(user, subject string) func(*testing.T) error {
				return func(t *testing.T) error {
					nc := a.connect(t, user, nats.PermissionErrOnSubscribe(true))
					sub, err := nc.SubscribeSync(subject)
					require.NoError(t, err)
					_, err = sub.NextMsg(30 * time.Second)
					return err
				}
			}
			guarded := func(user string, op func(ctx context.Context, b *bus.Bus) error) func(*testing.T) error {
				return func(t *testing.T) error {
					b, err := bus.New(a.connect(t, user))
					require.NoError(t, err)
					return b.Guard(ctx, func(ctx context.Context) error { return op(ctx, b) }, ">")
				}
			}
			tests := []struct {
				name string
				try  func(*testing.T) error
				op   string // the violation counted
				user string
			}{
				{"contract watches score events as they flow", core(access.Contract, "arena.score.>"), enforce.OpSubscribe, access.Contract},
				{"contract reads the score service's replies", core(access.Contract, "_INBOX.score.>"), enforce.OpSubscribe, access.Contract},
				{"runner listens on the leaderboard's requests", core(access.Runner, "lowbarena.ctl.leaderboard"), enforce.OpSubscribe, access.Runner},
				{"contract points its durable at score events", guarded(access.Contract, func(ctx context.Context, b *bus.Bus) error {
					_, err := b.EnsureConsumer(ctx, bus.ConsumerConfig{Name: "contract", Subjects: []string{events.Score.Completed.Filter()}})
					return err
				}), enforce.OpPublish, access.Contract},
				{"contract creates a durable of another name", guarded(access.Contract, func(ctx context.Context, b *bus.Bus) error {
					_, err := b.EnsureConsumer(ctx, bus.ConsumerConfig{Name: "spy", Subjects: []string{events.SubjectRootArena + ".>"}})
					return err
				}), enforce.OpPublish, access.Contract},
				{"build pulls from the score service's durable", guarded(access.Build, func(ctx context.Context, b *bus.Bus) error {
					c, err := b.JetStream().Consumer(ctx, events.StreamArena, "score")
					if err != nil {
						return err
					}
					_, err = c.Fetch(1, jetstream.FetchMaxWait(30*time.Second))
					return err
				}), enforce.OpPublish, access.Build},
				{"contract reads the score service's bucket", guarded(access.Contract, func(ctx context.Context, b *bus.Bus) error {
					_, err := b.JetStream().KeyValue(ctx, bus.BucketScoreInputs)
					return err
				}), enforce.OpPublish, access.Contract},
				{"quality reads a runner reference that is not its own", guarded(access.Quality, func(ctx context.Context, b *bus.Bus) error {
					kv, err := b.JetStream().KeyValue(ctx, bus.BucketReferences)
					if err != nil {
						return err
					}
					_, err = kv.Get(ctx, "pod-0.qwen3-tiny")
					return err
				}), enforce.OpPublish, access.Quality},
				{"runner reads the uploads", guarded(access.Runner, func(ctx context.Context, b *bus.Bus) error {
					_, err := b.JetStream().ObjectStore(ctx, bus.ObjectUploads)
					return err
				}), enforce.OpPublish, access.Runner},
				{"gateway writes the score service's bucket", guarded(access.Gateway, func(ctx context.Context, b *bus.Bus) error {
					_, err := b.JetStream().Publish(ctx, "$KV."+bus.BucketScoreInputs+".s1", []byte(`{}`))
					return err
				}), enforce.OpPublish, access.Gateway},
				{"score deletes the event log", guarded(access.Score, func(ctx context.Context, b *bus.Bus) error {
					return b.JetStream().DeleteStream(ctx, events.StreamArena)
				}), enforce.OpPublish, access.Score},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					before := a.violations(t, tt.op)[tt.user]
					err := tt.try(t)
					require.Error(t, err)
					if tt.op == enforce.OpSubscribe {
						require.ErrorIs(t, err, nats.ErrPermissionViolation)
					} else {
						require.ErrorIs(t, err, bus.ErrDenied)
						var de *bus.DeniedError
						require.ErrorAs(t, err, &de)
						require.Equal(t, reason.PermissionDenied, de.Code())
					}
					require.Eventually(t, func() bool { return a.violations(t, tt.op)[tt.user] > before }, 10*time.Second, 20*time.Millisecond)
				})
			}
		})
	}
}

// Wrong credentials are refused, and counted with the user they claimed.
func TestWrongCredentials(t *testing.T) {
	a := embedded(t)
	stranger, err := nkeys.CreateUser()
	require.NoError(t, err)
	strangerSeed, err := stranger.Seed()
	require.NoError(t, err)
	strangerFile := filepath.Join(t.TempDir(), "stranger.nk")
	require.NoError(t, os.WriteFile(strangerFile, strangerSeed, 0o600))
	strangerOpt, err := nats.NkeyOptionFromSeed(strangerFile)
	require.NoError(t, err)
	// Claiming the score service's key, signing with another's seed: the
	// nkey's "wrong password".
	scorePub := a.creds.Public(access.Score)
	impostor := nats.Nkey(scorePub, func(nonce []byte) ([]byte, error) { return stranger.Sign(nonce) })

	tests := []struct {
		name string
		opts []nats.Option
		user string
	}{
		{"no credentials", nil, "unknown"},
		{"a key the arena does not know", []nats.Option{strangerOpt}, "unknown"},
		{"the score service's key, signed with another seed", []nats.Option{impostor}, access.Score},
		{"a user and password the arena does not have", []nats.Option{nats.UserInfo(access.Operator, "hunter2")}, "user:" + access.Operator},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := a.violations(t, enforce.OpAuth)[tt.user]
			nc, err := nats.Connect(a.s.ClientURL(), append(tt.opts, nats.MaxReconnects(0))...)
			if nc != nil {
				nc.Close()
			}
			require.ErrorIs(t, err, nats.ErrAuthorization)
			require.Eventually(t, func() bool { return a.violations(t, enforce.OpAuth)[tt.user] == before+1 }, 10*time.Second, 20*time.Millisecond)
		})
	}
	// The right key still gets in.
	require.True(t, a.connect(t, access.Score).IsConnected())
}
