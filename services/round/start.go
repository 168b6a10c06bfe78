package round

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lowbarena/lowbarena/domain/campaign"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/observability"
	"github.com/lowbarena/lowbarena/platform/artifact"
	"github.com/lowbarena/lowbarena/platform/bus"
	"github.com/lowbarena/lowbarena/platform/ctl"
)

// Start validates a round, leases its pod, writes its state with its
// first steps settled and its baseline's SLA job requested, and carries
// those out. The round then moves on the runner's outcomes.
//
// Refusals (ctl errors with their codes): an unknown campaign (404), one
// with no engine (400), no or too many candidates or a candidate twice
// (400), an unknown submission (404), a submission of another campaign or
// whose contract has not been kept (400), a campaign without BF16 weights
// (campaign_no_reference, 503, nothing stored), the score service not
// answering (503), a pod no live runner serves or none named among several
// (round_pod_not_served, round_pod_required: see choosePod), and a pod
// already running a round (409).
//
// The round's trace starts here: a span of the request, whose context the
// round keeps (Round.Trace), so every event of the round, carried out now
// or on a later tick, is in it.
func (s *Service) Start(ctx context.Context, req ctl.StartRequest) (*Round, error) {
	ctx, span := s.bus.TracerProvider().Tracer(instrumentation).Start(ctx, "round start", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("lowbarena.campaign", req.Campaign), bus.AttrPod.String(req.Pod)))
	defer span.End()
	r, err := s.start(ctx, req)
	if err != nil {
		if refused := (*ctl.Error)(nil); errors.As(err, &refused) {
			span.SetAttributes(bus.AttrReason.String(refused.Code))
		}
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	return r, nil
}

// instrumentation names the round service's tracer.
const instrumentation = "github.com/lowbarena/lowbarena/services/round"

func (s *Service) start(ctx context.Context, req ctl.StartRequest) (*Round, error) {
	camp, err := s.opts.Campaigns.Lookup(req.Campaign)
	if err != nil {
		return nil, ctl.Refuse(ctl.CodeNotFound, "%s", err.Error())
	}
	if camp.Engine == nil {
		return nil, ctl.Refuse(ctl.CodeBadRequest, "campaign %s names no engine, so it cannot run rounds", camp.TaskID)
	}
	if len(req.Candidates) == 0 || len(req.Candidates) > MaxCandidates {
		return nil, ctl.Refuse(ctl.CodeBadRequest, "a round takes 1 to %d candidates, not %d", MaxCandidates, len(req.Candidates))
	}
	seen := map[string]bool{}
	for _, id := range req.Candidates {
		if seen[id] {
			return nil, ctl.Refuse(ctl.CodeBadRequest, "candidate %s is named twice", id)
		}
		seen[id] = true
	}
	pod, err := s.choosePod(ctx, req.Pod)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	r := &Round{Version: stateVersion, Campaign: camp.TaskID, Pod: pod, Status: StatusRunning, StartedAt: now,
		Candidates: slices.Clone(req.Candidates)}
	var lead Leader
	if e, err := s.rounds.Get(ctx, leaderKey(camp.TaskID)); err == nil {
		_ = json.Unmarshal(e.Value(), &lead)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("round: read the leader of %s: %w", camp.TaskID, err)
	}
	var entries []*Entry
	if lead.Submission != "" && !seen[lead.Submission] {
		inc, err := s.enter(ctx, camp, lead.Submission, "incumbent", "incumbent")
		if err != nil {
			return nil, prefixed("the incumbent "+lead.Submission, err)
		}
		r.Incumbent = lead.Submission
		entries = append(entries, inc)
	}
	for i, id := range req.Candidates {
		e, err := s.enter(ctx, camp, id, "candidate", fmt.Sprintf("candidate-%d", i+1))
		if err != nil {
			return nil, prefixed("candidate "+id, err)
		}
		entries = append(entries, e)
	}
	ref, err := s.reference(ctx, camp)
	if err != nil {
		return nil, err
	}
	if r.EngineBundle, err = s.engineSource(ctx, camp, entries); err != nil {
		return nil, err
	}
	r.Entries = append([]*Entry{{ID: "baseline", Role: "baseline", Checkpoint: ref, KVCacheDType: "auto"}}, entries...)
	r.Entries = append(r.Entries, &Entry{ID: "drift_baseline", Role: "drift_baseline", Checkpoint: ref, KVCacheDType: "auto"})
	r.ID = "round-" + events.DeriveID(camp.TaskID, pod, r.StartedAt.Format(time.RFC3339Nano), strings.Join(req.Candidates, ","))[:16]
	r.Steps = plan(r)
	trace.SpanFromContext(ctx).SetAttributes(bus.AttrRound.String(r.ID), bus.AttrPod.String(pod))
	r.Trace = map[string]string{}
	observability.Propagator().Inject(ctx, propagation.MapCarrier(r.Trace))

	// One round per pod: the lease is taken before the round exists, so
	// no running round is ever without one.
	if err := s.take(ctx, pod, r.ID); err != nil {
		return nil, err
	}
	r.emit(Effect{Started: &events.RoundStartedData{RoundID: r.ID, Campaign: r.Campaign, Pod: pod, Incumbent: r.Incumbent,
		Candidates: req.Candidates, Steps: len(r.Steps)}})
	advance(r, camp, now, s.opts.EntryTimeout)
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("round: encode round %s: %w", r.ID, err)
	}
	if _, err := s.rounds.Create(ctx, roundKey(r.ID), body); err != nil {
		_ = s.release(context.WithoutCancel(ctx), pod, r.ID)
		return nil, fmt.Errorf("round: write round %s: %w", r.ID, err)
	}
	s.log.Info("round started", "round", r.ID, "campaign", r.Campaign, "pod", pod, "incumbent", r.Incumbent, "candidates", len(req.Candidates), "steps", len(r.Steps))
	if err := s.flush(ctx, r.ID); err != nil {
		// Committed: the ticker carries the effects out.
		s.log.Warn("round effects wait for the next tick", "round", r.ID, "err", err)
	}
	return r, nil
}

// prefixed names who a refusal is about, keeping its code.
func prefixed(who string, err error) error {
	var refused *ctl.Error
	if errors.As(err, &refused) {
		return ctl.Refuse(refused.Code, "%s: %s", who, refused.Message)
	}
	return fmt.Errorf("%s: %w", who, err)
}

// reference stores the campaign's BF16 reference for the runner, after
// checking that its folder holds weights (nothing is stored otherwise).
func (s *Service) reference(ctx context.Context, camp *campaign.Campaign) (events.BundleRef, error) {
	if err := camp.CheckReference(); err != nil {
		return events.BundleRef{}, ctl.Refuse(ctl.CodeUnavailable, "%s: %s", reason.CampaignNoReference, err.Error())
	}
	ref, err := artifact.PutDir(ctx, s.artifacts, camp.ReferenceDir())
	if err != nil {
		return events.BundleRef{}, fmt.Errorf("campaign %s: store its BF16 reference: %w", camp.TaskID, err)
	}
	return ref, nil
}

// engineSource stores the campaign's pinned engine source tree for the
// runner (artifact.PutTree: content addressed, so a tree the campaign's
// push or another stage stored already stores nothing new) when an entry
// patches the engine; nil otherwise. An entry with a patch in a campaign
// that no longer pins a source is refused: it cannot be served as it was
// measured.
func (s *Service) engineSource(ctx context.Context, camp *campaign.Campaign, entries []*Entry) (*events.BundleRef, error) {
	patched := ""
	for _, e := range entries {
		if e.Patch != "" {
			patched = e.Submission
			break
		}
	}
	if patched == "" {
		return nil, nil
	}
	dir := camp.EngineSourceDir()
	if dir == "" {
		return nil, ctl.Refuse(ctl.CodeBadRequest, "%s patches the engine, and campaign %s pins no engine source to build it on", patched, camp.TaskID)
	}
	ref, err := artifact.PutTree(ctx, s.artifacts, dir)
	if err != nil {
		return nil, fmt.Errorf("campaign %s: store its engine source: %w", camp.TaskID, err)
	}
	return &ref, nil
}

// enter asks the score service whether a submission can enter a round of
// camp, and describes its entry: the checkpoint its kept contract names
// and the KV dtype its engine ran.
func (s *Service) enter(ctx context.Context, camp *campaign.Campaign, id, role, entryID string) (*Entry, error) {
	if !events.ValidID(id) {
		return nil, ctl.Refuse(ctl.CodeBadRequest, "%q is not a submission id", id)
	}
	st, err := s.standing(ctx, id)
	var refused *ctl.Error
	switch {
	case errors.As(err, &refused) && refused.Code == ctl.CodeNotFound:
		return nil, ctl.Refuse(ctl.CodeNotFound, "the arena has no submission %s", id)
	case errors.Is(err, ctl.ErrNoService):
		return nil, ctl.Refuse(ctl.CodeUnavailable, "the score service does not answer, so the round cannot check its entries: %s", err.Error())
	case err != nil:
		return nil, ctl.Refuse(ctl.CodeUnavailable, "the score service could not tell its standing: %s", err.Error())
	}
	if st.Campaign != camp.TaskID {
		return nil, ctl.Refuse(ctl.CodeBadRequest, "it belongs to campaign %s, not %s", st.Campaign, camp.TaskID)
	}
	if !st.ContractKept || st.Artifact == nil {
		msg := "its contract has not been kept, so it cannot enter a round"
		if st.Failed != "" {
			msg += " (" + st.Failed + ")"
		}
		return nil, ctl.Refuse(ctl.CodeBadRequest, "%s", msg)
	}
	kv := st.KVCacheDType
	if kv == "" {
		kv = "auto"
	}
	e := &Entry{ID: entryID, Role: role, Submission: id, Checkpoint: *st.Artifact, KVCacheDType: kv}
	if st.Patch != nil {
		e.Patch, e.EngineDigest = st.Patch.Path, st.Patch.EngineDigest
	}
	return e, nil
}
