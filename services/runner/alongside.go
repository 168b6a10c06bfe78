package runner

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ce"
)

// alongside answers a submission's quality job on the candidate's engine
// while the submission's efficiency job holds it (job.Runner's
// AfterCandidate hook): the candidate's measured run is over, its engine
// kept, and the budget replays, which restart it, are next. Without this
// a pod that took the efficiency job first would start the same engine
// again for the quality job.
//
// The quality job is looked up queued on RUNNER_JOBS under its id
// (events.QualityJobID) and handled here as a delivery of it (Handle,
// NumDelivered 0: its runner.job.started, progress and outcome as any
// runner's, its rows under its own run); it stays queued, and the runner
// it is delivered to later finds its outcome stored and acks it unrun
// (Handle's ended). So it runs once whatever happens: nothing queued (it
// ran, or is not asked yet), a job another live runner runs now
// (heldElsewhere), or one with an outcome already, is left alone; a
// runner that takes it while it runs here hands it back (Handle's
// heldElsewhere check); this runner killed while it runs here leaves it
// queued for any runner, as before. The efficiency job's message is kept
// in progress meanwhile by the consume loop's heartbeats.
//
// Until the candidate's measured run ends, the efficiency job's entry in
// the pods registry says it will answer the quality job
// (PodJob.QualityAlongside): another runner handed the quality job then
// holds it until it no longer says so (Service.notHere), so the job
// prefers the pod that holds its engine.
type alongside struct {
	once sync.Once
	// jobs is the RUNNER_JOBS stream, nil when it could not be opened
	// (the runner's NATS user may not read it: a deployment whose
	// auth.conf predates this; then nothing is answered alongside).
	jobs jetstream.Stream
}

// qualityAlongside is the efficiency job eff's hook (see alongside).
func (s *Service) qualityAlongside(eff events.RunnerJobRequestedData, running *events.PodJob) func(ctx context.Context) {
	return func(ctx context.Context) {
		// Whatever is found, the efficiency job answers no quality job
		// after this (its entry no longer says so).
		defer s.pod.setJob(running)
		if eff.SubmissionID == "" {
			return
		}
		stream := s.jobsStream(ctx)
		if stream == nil {
			return
		}
		id := events.QualityJobID(eff.SubmissionID)
		subject, err := events.JobSubject(events.JobQuality, id)
		if err != nil {
			return
		}
		var m *jetstream.RawStreamMsg
		err = s.bus.Guard(ctx, func(ctx context.Context) (err error) {
			m, err = stream.GetLastMsgForSubject(ctx, subject)
			return err
		}, "$JS.API.STREAM.MSG.GET."+events.StreamRunnerJobs, "$JS.API.DIRECT.GET."+events.StreamRunnerJobs+".>")
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return
		case err != nil:
			s.log.Warn("could not look for the submission's quality job", "submission", eff.SubmissionID, "err", err)
			return
		}
		ev, err := ce.Decode(m.Header, m.Data)
		if err != nil {
			return
		}
		if holder, err := s.heldElsewhere(ctx, id); err != nil || holder != "" {
			return
		}
		s.log.Info("answering the submission's quality job on the candidate's engine, before its budget replays",
			"submission", eff.SubmissionID, "job", id, "efficiency_job", eff.JobID)
		out := s.Handle(ctx, &bus.Delivery{Event: ev, Subject: m.Subject, StreamSeq: m.Sequence, Stored: m.Time})
		if !out.IsAck() {
			s.log.Info("the quality job answered alongside did not end here; it stays queued", "job", id, "outcome", out.String(), "err", out.Err())
		}
	}
}

// jobsStream opens RUNNER_JOBS once; nil when it cannot be read.
func (s *Service) jobsStream(ctx context.Context) jetstream.Stream {
	s.along.once.Do(func() {
		var st jetstream.Stream
		err := s.bus.Guard(ctx, func(ctx context.Context) (err error) {
			st, err = s.bus.JetStream().Stream(ctx, events.StreamRunnerJobs)
			return err
		}, "$JS.API.STREAM.INFO."+events.StreamRunnerJobs)
		if err != nil {
			s.log.Warn("cannot read RUNNER_JOBS: quality jobs are not answered on the efficiency job's engine (grant the runner's NATS user what deploy/nats/auth.conf grants it)", "err", err)
			return
		}
		s.along.jobs = st
	})
	return s.along.jobs
}
