package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/access"
)

// WorkInHand says whether a service holds messages it has not settled:
// one of its durables has acks pending. That is the moment a kill hits
// it mid-stage.
func (c *Cluster) WorkInHand(ctx context.Context, s *Service) bool {
	u, ok := access.Lookup(s.User)
	if !ok {
		return false
	}
	for _, cons := range u.Consumers {
		info, err := c.consumerInfo(ctx, cons.Stream, cons.Name)
		if err == nil && info.NumAckPending > 0 {
			return true
		}
	}
	return false
}

func (c *Cluster) consumerInfo(ctx context.Context, stream, name string) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cons, err := c.JS.Consumer(ctx, stream, name)
	if err != nil {
		return nil, err
	}
	return cons.Info(ctx)
}

// JobRun is what the log says of one runner job.
type JobRun struct {
	ID, Kind, Submission, Round string
	// Starts counts runner.job.started (one per delivery that got that
	// far); Runners names who started it, in order.
	Starts  int
	Runners []string
	// Outcome is completed or failed, "" while it runs; By names the
	// runner that ended it; GPUHours are the outcome's.
	Outcome, By string
	GPUHours    float64
}

// Jobs reads the runners' started, completed and failed events.
func (c *Cluster) Jobs(ctx context.Context) (map[string]*JobRun, error) {
	jobs := map[string]*JobRun{}
	filters := []string{events.Job.Started.Filter(), "arena.runner.job.completed.>", "arena.runner.job.failed.>"}
	err := readFiltered(ctx, c.JS, events.StreamArena, filters, func(e Event) {
		var d struct {
			JobID        string  `json:"job_id"`
			Kind         string  `json:"kind"`
			SubmissionID string  `json:"submission_id"`
			RoundID      string  `json:"round_id"`
			Runner       string  `json:"runner"`
			GPUHours     float64 `json:"gpu_hours"`
		}
		if json.Unmarshal(e.Data, &d) != nil || d.JobID == "" {
			return
		}
		j := jobs[d.JobID]
		if j == nil {
			j = &JobRun{ID: d.JobID, Kind: d.Kind, Submission: d.SubmissionID, Round: d.RoundID}
			jobs[d.JobID] = j
		}
		switch events.Type(e.Type) {
		case events.RunnerJobStarted:
			j.Starts++
			j.Runners = append(j.Runners, d.Runner)
		case events.RunnerJobCompleted:
			j.Outcome, j.By, j.GPUHours = "completed", d.Runner, d.GPUHours
		case events.RunnerJobFailed:
			j.Outcome, j.By, j.GPUHours = "failed", d.Runner, d.GPUHours
		}
	})
	return jobs, err
}

// Current is the job a runner named runner has started and not ended,
// nil when it has none.
func Current(jobs map[string]*JobRun, runner string) *JobRun {
	for _, j := range jobs {
		if j.Outcome == "" && len(j.Runners) > 0 && j.Runners[len(j.Runners)-1] == runner {
			return j
		}
	}
	return nil
}

// readFiltered reads the events of stream on filters, in order.
func readFiltered(ctx context.Context, js jetstream.JetStream, stream string, filters []string, fn func(Event)) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("cluster: stream %s: %w", stream, err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		return fmt.Errorf("cluster: read %s: %w", stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("cluster: read %s: %w", stream, err)
	}
	for pending := info.NumPending; pending > 0; pending-- {
		m, err := nextMsg(cons)
		if err != nil {
			return fmt.Errorf("cluster: read %s: %w", stream, err)
		}
		e, err := decodeEvent(m)
		if err != nil {
			return err
		}
		fn(e)
	}
	return nil
}

// Kill is one SIGKILL the harness sent.
type Kill struct {
	Service string
	At      time.Time
	// InHand says the service held unsettled messages; Job is the job a
	// killed runner was running.
	InHand bool
	Job    string
}

// KillOptions shape KillServices.
type KillOptions struct {
	// Kills is how many SIGKILLs to send.
	Kills int
	// Gap is the least time between two kills of one service (default
	// 20 s): a message in hand is redelivered after its ack deadline, and
	// a service killed on every delivery of one message would see it
	// dead-lettered, which no healthy run does.
	Gap time.Duration
	// MaxJobStarts: a runner is killed only while its job has been
	// started fewer times than this (default 2: the runners' MaxDeliver
	// is 3, and a job whose runner died three times is dead-lettered by
	// design).
	MaxJobStarts int
	// Idle is how long no service may have work in hand before the loop
	// gives up (default 3 min): the pipeline stalled.
	Idle time.Duration
	// Rand chooses the service and the moments.
	Rand *rand.Rand
	// Logf reports each kill.
	Logf func(format string, args ...any)
}

// KillServices sends opts.Kills SIGKILLs, each to a service chosen at
// random among those with work in hand (mid-stage), at a random moment,
// and starts the service again up to 2 s later. It returns when every
// kill is done or ctx ends, with the kills sent.
func (c *Cluster) KillServices(ctx context.Context, opts KillOptions) ([]Kill, error) {
	if opts.Gap <= 0 {
		opts.Gap = 20 * time.Second
	}
	if opts.Idle <= 0 {
		opts.Idle = 3 * time.Minute
	}
	if opts.MaxJobStarts <= 0 {
		opts.MaxJobStarts = 2
	}
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(1, 2))
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	var kills []Kill
	last := map[string]time.Time{}
	var restarts sync.WaitGroup
	defer restarts.Wait()
	idleSince := time.Now()
	for len(kills) < opts.Kills {
		if err := ctx.Err(); err != nil {
			return kills, err
		}
		if time.Since(idleSince) > opts.Idle {
			return kills, fmt.Errorf("%w: no service had work in hand for %s (the pipeline stalled?) after %d kills", ErrNotReady, opts.Idle, len(kills))
		}
		var jobs map[string]*JobRun
		var candidates []*Service
		for _, name := range c.ServiceNames() {
			s := c.Services[name]
			if time.Since(last[name]) < opts.Gap || !s.Running() || s.Held() {
				continue
			}
			if s.Kind == "runner" {
				if jobs == nil {
					var err error
					if jobs, err = c.Jobs(ctx); err != nil {
						jobs = map[string]*JobRun{}
					}
				}
				if j := Current(jobs, s.Pod+"/runner"); j == nil || j.Starts >= opts.MaxJobStarts {
					continue
				}
			} else if !c.WorkInHand(ctx, s) {
				continue
			}
			candidates = append(candidates, s)
		}
		if len(candidates) == 0 {
			select {
			case <-ctx.Done():
				return kills, ctx.Err()
			case <-time.After(250 * time.Millisecond): // polling interval, not an assertion
			}
			continue
		}
		idleSince = time.Now()
		s := candidates[opts.Rand.IntN(len(candidates))]
		// A random point of its stage: up to a second and a half in.
		time.Sleep(time.Duration(opts.Rand.Int64N(int64(1500 * time.Millisecond))))
		if s.Held() || !s.Running() {
			continue // another fault took it meanwhile
		}
		k := Kill{Service: s.Name, At: time.Now(), InHand: true}
		if s.Kind == "runner" && jobs != nil {
			if j := Current(jobs, s.Pod+"/runner"); j != nil {
				k.Job = j.ID
			}
		}
		if err := s.Kill(); err != nil {
			return kills, err
		}
		last[s.Name] = time.Now()
		kills = append(kills, k)
		opts.Logf("kill %d/%d: %s (job %s)", len(kills), opts.Kills, s.Name, k.Job)
		back := time.Duration(opts.Rand.Int64N(int64(2 * time.Second)))
		restarts.Go(func() {
			time.Sleep(back)
			if !s.Held() {
				_ = s.Start()
			}
		})
	}
	return kills, nil
}

// StreamLeader is the node that leads stream now.
func (c *Cluster) StreamLeader(ctx context.Context, stream string) (*Node, error) {
	info, err := c.streamInfo(ctx, stream)
	if err != nil {
		return nil, err
	}
	if info.Cluster == nil {
		return nil, fmt.Errorf("cluster: stream %s has no cluster info", stream)
	}
	return c.node(info.Cluster.Leader)
}

func (c *Cluster) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := c.JS.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("cluster: stream %s: %w", stream, err)
	}
	return s.Info(ctx)
}

// MetaLeader is the node that leads JetStream's meta group now, as a
// running node's /jsz says.
func (c *Cluster) MetaLeader(ctx context.Context) (*Node, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		j, err := n.JSZ(ctx)
		if err == nil && j.Meta.Leader != "" {
			return c.node(j.Meta.Leader)
		}
	}
	return nil, fmt.Errorf("%w: no node names a meta leader", ErrNotReady)
}

func (c *Cluster) node(name string) (*Node, error) {
	for _, n := range c.Nodes {
		if n.ServerName == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("cluster: no node %q", name)
}

// WaitGrowth waits until stream holds a message past seq: the pipeline
// went on.
func (c *Cluster) WaitGrowth(ctx context.Context, stream string, seq uint64, wait time.Duration) (uint64, error) {
	deadline := time.Now().Add(wait)
	for {
		info, err := c.streamInfo(ctx, stream)
		if err == nil && info.State.LastSeq > seq {
			return info.State.LastSeq, nil
		}
		if time.Now().After(deadline) {
			//nolint:errorlint // err is nil when the stream answered but had not grown: shown, not wrapped
			return 0, fmt.Errorf("%w: %s held nothing after sequence %d for %s (%v)", ErrNotReady, stream, seq, wait, err)
		}
		time.Sleep(250 * time.Millisecond) // polling interval, not an assertion
	}
}

// Rejoin starts a node that was killed, waits until it answers, then
// until it is a current replica of every stream again.
func (c *Cluster) Rejoin(ctx context.Context, n *Node) error {
	if err := n.Start(); err != nil {
		return err
	}
	if err := n.WaitHealthy(ctx, 2*time.Minute); err != nil {
		return err
	}
	return c.WaitCurrent(ctx, n, 3*time.Minute)
}

// WaitCurrent waits until node is a current replica (or the leader) of
// every stream of the arena: it rejoined and caught up.
func (c *Cluster) WaitCurrent(ctx context.Context, n *Node, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var why string
	for {
		why = ""
		for _, stream := range []string{events.StreamArena, events.StreamRunnerJobs, events.StreamDLQ} {
			info, err := c.streamInfo(ctx, stream)
			if err != nil {
				why = err.Error()
				break
			}
			if info.Cluster == nil {
				why = stream + " has no cluster info"
				break
			}
			if info.Cluster.Leader == n.ServerName {
				continue
			}
			i := slices.IndexFunc(info.Cluster.Replicas, func(p *jetstream.PeerInfo) bool { return p.Name == n.ServerName })
			if i < 0 || !info.Cluster.Replicas[i].Current || info.Cluster.Replicas[i].Offline {
				why = fmt.Sprintf("%s: %s is not a current replica", stream, n.ServerName)
				break
			}
		}
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s did not rejoin within %s: %s", ErrNotReady, n.Name, wait, why)
		}
		time.Sleep(250 * time.Millisecond) // polling interval, not an assertion
	}
}

// Children lists the processes whose parent is pid (from /proc).
func Children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		s := string(raw)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// Alive says whether process pid exists (and is not a zombie).
func Alive(pid int) bool {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// ErrLost is wrapped by errors that say something was lost.
var ErrLost = errors.New("cluster: lost")
