package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/ce"
)

// ended reports the outcome the job request ev already has on the ARENA
// stream: its type (runner.job.completed or runner.job.failed, "" when
// it has none) and, for a failure, its reason. A runner's outcome, and
// the job_abandoned a dead letter publishes, take their ids from the
// request's id alone (see Handle and Abandon), so an outcome stored on
// the job's subject with that id is this request's; one with another id
// is an earlier request's of the same job, and ends nothing here. So does
// one stored before the request itself was (stored, the request's time
// in RUNNER_JOBS, both the servers' clocks): a request the stage made
// again under the same id once the streams' duplicate window had passed
// (a BF16 reference asked for again after its state was cleared) runs
// again. The zero stored time compares nothing.
//
// A user whose permissions do not grant this read (an auth.conf that
// lacks it) is refused at once, an error that matches bus.ErrDenied.
//
// It is how a job whose runner published the outcome and died (or lost
// its ack) before the ack reached the server is not run a second time on
// its redelivery (the GPU's time spent again, a second run's rows
// written), nor given up after it ended.
func (s *Service) ended(ctx context.Context, ev event.Event, stored time.Time, kind, job string) (t events.Type, reason string, err error) {
	for _, t := range []events.Type{events.RunnerJobCompleted, events.RunnerJobFailed} {
		subject, err := events.JobOutcomeSubject(t, kind, job)
		if err != nil {
			// A kind or id that names no subject has no outcome: the
			// handler fails it for what it is.
			return "", "", nil
		}
		var m *jetstream.RawStreamMsg
		err = s.bus.Guard(ctx, func(ctx context.Context) (err error) {
			m, err = s.arena.GetLastMsgForSubject(ctx, subject)
			return err
		}, "$JS.API.STREAM.MSG.GET."+events.StreamArena, "$JS.API.DIRECT.GET."+events.StreamArena+".>")
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		} else if err != nil {
			return "", "", fmt.Errorf("runner: read %s: %w", subject, err)
		}
		out, err := ce.Decode(m.Header, m.Data)
		if err != nil || out.ID() != events.DeriveID(ev.ID(), string(t)) || m.Time.Before(stored) {
			continue
		}
		if t == events.RunnerJobFailed {
			f, err := events.Job.Failed.Decode(out)
			if err != nil {
				return "", "", fmt.Errorf("runner: %s: %w", subject, err)
			}
			return t, f.Reason, nil
		}
		return t, "", nil
	}
	return "", "", nil
}
