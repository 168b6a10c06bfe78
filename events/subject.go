package events

import (
	"encoding/json"
	"strings"
)

// SubjectField is the payload field that names the CloudEvents subject of
// an event of this type: job_id for the runner's job events, round_id for
// a round's, submission_id for everything else. Every payload carries it.
func (s Spec) SubjectField() string {
	switch {
	case s.Noun == "runner.job":
		return "job_id"
	case s.Noun == "round" || strings.HasPrefix(s.Noun, "round."):
		return "round_id"
	}
	return "submission_id"
}

// SubjectFromData returns the subject an event of type t names in its data
// (see Spec.SubjectField), and false when the type is unknown or the data
// holds no such string. The consume loop fills an event's subject from it
// when the publisher left the OPTIONAL subject attribute out.
func SubjectFromData(t Type, data []byte) (string, bool) {
	s, ok := Lookup(t)
	if !ok {
		return "", false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil {
		return "", false
	}
	var v string
	if raw, ok := fields[s.SubjectField()]; !ok || json.Unmarshal(raw, &v) != nil || v == "" {
		return "", false
	}
	return v, true
}
