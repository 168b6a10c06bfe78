package score

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// submitted is what the score keeps of a submission's submission.received:
// who submitted it, how, on which split and for which task.
type submitted struct {
	Participant string `json:"participant"`
	Method      string `json:"method,omitempty"`
	Split       string `json:"split"`
	TaskID      string `json:"task_id"`
}

func submittedOf(d events.SubmissionReceivedData) *submitted {
	return &submitted{Participant: d.Participant, Method: d.Solution.Method, Split: d.Split, TaskID: d.TaskID}
}

// joined is a submission's entry in score_inputs: its submission and its
// three outcomes, each set once it arrived. An entry whose outcomes came
// before its submission.received has no submission (see withSubmission).
type joined struct {
	Submission *submitted                      `json:"submission,omitempty"`
	Contract   *events.ContractCompletedData   `json:"contract,omitempty"`
	Quality    *events.QualityCompletedData    `json:"quality,omitempty"`
	Efficiency *events.EfficiencyCompletedData `json:"efficiency,omitempty"`
}

// complete says the three outcomes are in; the submission is not needed
// to say so (an entry may lack it, see withSubmission).
func (j joined) complete() bool { return j.Contract != nil && j.Quality != nil && j.Efficiency != nil }

// pending names the outcomes not in yet, in pipeline order.
func (j joined) pending() []string {
	out := []string{}
	for _, p := range []struct {
		name string
		in   bool
	}{{events.Contract.Name, j.Contract != nil}, {events.Quality.Name, j.Quality != nil}, {events.Efficiency.Name, j.Efficiency != nil}} {
		if !p.in {
			out = append(out, p.name)
		}
	}
	return out
}

// setter decodes a delivery into what it sets in its submission's entry;
// nil for an event the stage does not join.
func setter(d *bus.Delivery) (func(*joined), error) {
	switch events.Type(d.Event.Type()) {
	case events.Submission.Received.Type():
		v, err := events.Submission.Received.Decode(d.Event)
		return func(j *joined) { j.Submission = submittedOf(v) }, err
	case events.Contract.Completed.Type():
		v, err := events.Contract.Completed.Decode(d.Event)
		return func(j *joined) { j.Contract = &v }, err
	case events.Quality.Completed.Type():
		v, err := events.Quality.Completed.Decode(d.Event)
		return func(j *joined) { j.Quality = &v }, err
	case events.Efficiency.Completed.Type():
		v, err := events.Efficiency.Completed.Decode(d.Event)
		return func(j *joined) { j.Efficiency = &v }, err
	}
	return nil, nil
}

// Handle adds a submission or one of its outcomes to the submission's
// join, and scores the submission once the three outcomes are there.
//
// Idempotency: the join is a compare-and-set update of one key, and
// setting a part twice changes nothing; the score's event id derives
// from the submission, the output type and the policy, and its row's key
// is (submission, policy), so however often the last part arrives (a
// restart, a redelivery) one score is published and one row kept. Ack
// semantics: a payload that does not decode is Poison; a KV, stream,
// store or NATS error is a Retry; a submission that cannot be scored is
// a score.failed and an Ack.
func (s *Service) Handle(ctx context.Context, d *bus.Delivery) bus.Outcome {
	set, err := setter(d)
	if err != nil {
		return bus.Poison(reason.BadPayload, err)
	}
	if set == nil {
		return bus.Ack()
	}
	id := d.Event.Subject()
	var j joined
	for attempt := 0; ; attempt++ {
		var rev uint64
		j, rev, err = s.load(ctx, id)
		if err != nil {
			return bus.Retry(0, err)
		}
		set(&j)
		body, err := json.Marshal(j)
		if err != nil {
			return bus.Poison(reason.BadPayload, err)
		}
		if rev == 0 {
			_, err = s.inputs.Create(ctx, id, body)
		} else {
			_, err = s.inputs.Update(ctx, id, body, rev)
		}
		if err == nil {
			break
		}
		if attempt < 10 && bus.Conflict(err) {
			continue // another part of this submission landed first
		}
		return bus.Retry(0, err)
	}
	if !j.complete() {
		return bus.Ack()
	}
	if err := s.withSubmission(ctx, id, &j); err != nil {
		return bus.Retry(0, err)
	}
	if err := s.score(ctx, id, j, s.policy); err != nil {
		return bus.Retry(0, err)
	}
	return bus.Ack()
}

// load reads a submission's entry and its revision; revision 0 is an
// entry not begun (KV revisions start at 1). An entry that does not
// decode starts again empty, as a missing one.
func (s *Service) load(ctx context.Context, id string) (joined, uint64, error) {
	e, err := s.inputs.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return joined{}, 0, nil
	} else if err != nil {
		return joined{}, 0, fmt.Errorf("score: read the join of %s: %w", id, err)
	}
	var j joined
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		j = joined{}
	}
	return j, e.Revision(), nil
}

// withSubmission fills in the submission of an entry that lacks it (its
// outcomes were joined before its submission.received, whose delivery
// was retried or is still to come) from the ARENA stream; it stays nil
// when the stream has none either.
func (s *Service) withSubmission(ctx context.Context, id string, j *joined) error {
	if j.Submission != nil {
		return nil
	}
	sub, err := s.received(ctx, id)
	j.Submission = sub
	return err
}

// received reads a submission's submission.received from the ARENA
// stream: nil, nil when the stream has none.
func (s *Service) received(ctx context.Context, id string) (*submitted, error) {
	v, ok, err := bus.Last(ctx, s.arena, events.Submission.Received, id)
	if err != nil {
		return nil, fmt.Errorf("score: %w", err)
	}
	if !ok {
		return nil, nil
	}
	return submittedOf(v), nil
}
