package events

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// NewEvent builds a CloudEvent of type t about subject (a submission, round
// or job id) from source, with the given id and data marshalled as JSON. The
// id should come from DeriveID, so that a retry builds the same event.
func NewEvent(id string, t Type, source, subject string, data any) (event.Event, error) {
	if _, ok := Lookup(t); !ok {
		return event.Event{}, fmt.Errorf("%w %q", ErrUnknownType, t)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return event.Event{}, fmt.Errorf("events: marshal %s data: %w", t, err)
	}
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(id)
	e.SetType(string(t))
	e.SetSource(source)
	e.SetSubject(subject)
	e.SetTime(time.Now().UTC())
	if err := e.SetData(event.ApplicationJSON, raw); err != nil {
		return event.Event{}, fmt.Errorf("events: set %s data: %w", t, err)
	}
	return e, nil
}

// DecodeData unmarshals the data of e into the payload type its spec names,
// and returns it (a pointer, as Spec.New returns).
func DecodeData(e event.Event) (any, error) {
	s, ok := Lookup(Type(e.Type()))
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, e.Type())
	}
	v := s.New()
	if err := json.Unmarshal(e.Data(), v); err != nil {
		return nil, fmt.Errorf("events: decode %s data: %w", e.Type(), err)
	}
	return v, nil
}
