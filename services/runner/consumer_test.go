package runner_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/bus/bustest"
	"github.com/lowbarena/lowbarena/platform/workqueue"
	"github.com/lowbarena/lowbarena/services/runner"
)

// TestRunnerConsumerSettings: the runners' durable keeps prefetch 1 and the
// runner's own ack deadline (heartbeated every third of it by the consume
// loop), whatever the bus's default prefetch for short handlers is.
func TestRunnerConsumerSettings(t *testing.T) {
	b, _ := bustest.Bus(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name    string
		ackWait time.Duration
		want    time.Duration
	}{
		{"default ack wait", 0, 30 * time.Second},
		{"configured ack wait", 5 * time.Minute, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := runner.New(context.Background(), b, log, runner.Options{WorkDir: t.TempDir(), AckWait: tc.ackWait})
			require.NoError(t, err)
			c := s.Consumer()
			require.Equal(t, 1, c.Prefetch)
			require.Equal(t, tc.want, c.AckWait)
			require.Equal(t, events.StreamRunnerJobs, c.Stream)
			require.Equal(t, runner.Name, c.Name)
			require.Equal(t, []string{events.JobSharedFilter}, c.Subjects)
			// The pod's durable: the same settings, its own name and filter,
			// dead letters under the runner's name.
			p := s.PodConsumer()
			require.Equal(t, 1, p.Prefetch)
			require.Equal(t, tc.want, p.AckWait)
			require.Equal(t, c.MaxDeliver, p.MaxDeliver)
			require.Equal(t, events.StreamRunnerJobs, p.Stream)
			require.Equal(t, "runner-pod-0", p.Name)
			require.Equal(t, []string{"jobs.*.*.pod-0"}, p.Subjects)
			require.Equal(t, runner.Name, p.DeadLetterAs)
		})
	}
}

// TestRunnerHoldsOneJobAtATime: a runner busy with a job holds no other;
// a job queued meanwhile goes to the next idle runner that may take it. The
// runners run the service's own loop (ConsumeFirst over its pod's durable,
// then the shared one), with a handler that holds the "busy" runner. With
// anything pulled ahead, the busy runner would hold the second job in its
// buffer, where it would wait behind the first with its ack timer running,
// and the idle runner would see it only once that timer ran out, as a
// redelivery.
func TestRunnerHoldsOneJobAtATime(t *testing.T) {
	for _, tc := range []struct {
		name string
		// pod of the second job ("" shared) and of the idle runner.
		jobPod, idlePod string
	}{
		{"a shared job goes to an idle runner of another pod", "", "pod-b"},
		{"a pinned job goes to an idle runner of its pod", "pod-a", "pod-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := bustest.Bus(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))

			type got struct {
				runner, job string
				delivery    uint64
			}
			seen := make(chan got, 8)
			release := make(chan struct{})
			run := func(name, pod string) {
				s, err := runner.New(ctx, b, log, runner.Options{Pod: pod, WorkDir: t.TempDir()})
				require.NoError(t, err)
				_, err = b.EnsureConsumer(ctx, s.Consumer())
				require.NoError(t, err)
				rctx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() {
					done <- workqueue.ConsumeFirst(rctx, b, []bus.ConsumerConfig{s.PodConsumer(), s.Consumer()}, 200*time.Millisecond,
						func(hctx context.Context, d *bus.Delivery) bus.Outcome {
							seen <- got{name, d.Event.ID(), d.NumDelivered}
							if name == "busy" {
								select { // a long job
								case <-release:
								case <-hctx.Done():
									return bus.Retry(0, hctx.Err())
								}
							}
							return bus.Ack()
						})
				}()
				t.Cleanup(func() { stop(); require.NoError(t, <-done) })
			}
			next := func() got {
				select {
				case g := <-seen:
					return g
				case <-ctx.Done():
					t.Fatal("no job was handled")
					return got{}
				}
			}

			run("busy", "pod-a")
			publishJob(t, ctx, b, "job-1", "pod-a")
			require.Equal(t, got{"busy", "job-1", 1}, next())
			publishJob(t, ctx, b, "job-2", tc.jobPod) // queued while the only runner is busy
			run("idle", tc.idlePod)
			require.Equal(t, got{"idle", "job-2", 1}, next(), "the queued job goes to the idle runner on its first delivery")
			close(release)
		})
	}
}

// publishJob queues a sample job, pinned to pod unless pod is "".
func publishJob(t *testing.T, ctx context.Context, b *bus.Bus, id, pod string) {
	t.Helper()
	req := bustest.Sample(events.RunnerJobRequested).(*events.RunnerJobRequestedData)
	req.JobID, req.Pod = id, pod
	_, err := bus.Emit(ctx, b, events.Source("test"), events.Job.Requested, id, *req, bus.WithID(id))
	require.NoError(t, err)
}

// TestPinnedJobSubjects: a job that names its pod goes to
// jobs.<kind>.<id>.<pod>, which only that pod's durable matches; one
// without stays on jobs.<kind>.<id>, which only the shared durable
// matches.
func TestPinnedJobSubjects(t *testing.T) {
	b, _ := bustest.Bus(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := runner.New(ctx, b, log, runner.Options{Pod: "pod-a", WorkDir: t.TempDir()})
	require.NoError(t, err)
	for _, tc := range []struct {
		pod, subject, durable string
	}{
		{"", "jobs." + bustest.SampleJobKind + ".j-shared", runner.Name},
		{"pod-a", "jobs." + bustest.SampleJobKind + ".j-pinned.pod-a", "runner-pod-a"},
	} {
		t.Run(tc.durable, func(t *testing.T) {
			id := "j-shared"
			if tc.pod != "" {
				id = "j-pinned"
			}
			publishJob(t, ctx, b, id, tc.pod)
			st, err := b.JetStream().Stream(ctx, events.StreamRunnerJobs)
			require.NoError(t, err)
			m, err := st.GetLastMsgForSubject(ctx, tc.subject)
			require.NoError(t, err, "the job is stored on %s", tc.subject)
			require.Equal(t, id, m.Header.Get("Nats-Msg-Id"))
			for _, c := range []bus.ConsumerConfig{s.PodConsumer(), s.Consumer()} {
				matches := subjectMatches(c.Subjects[0], tc.subject)
				require.Equal(t, c.Name == tc.durable, matches, "%s on %s", c.Name, tc.subject)
			}
		})
	}
	_, err = runner.New(ctx, b, log, runner.Options{Pod: "pod.a", WorkDir: t.TempDir()})
	require.ErrorContains(t, err, "letters, digits, - and _")
}

// subjectMatches reports whether filter (with * wildcards) matches subject.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	if len(f) != len(s) {
		return false
	}
	for i := range f {
		if f[i] != "*" && f[i] != s[i] {
			return false
		}
	}
	return true
}
