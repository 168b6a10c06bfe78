package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

//go:embed events/*.json record/*.json
var jsonFS embed.FS

// Base is the URL under which every schema has its $id.
const Base = "https://lowbarena.dev/schemas/"

// RecordSchema is the $id of the submission record's schema.
const RecordSchema = Base + "record/submission.schema.json"

// ErrUnknownType is returned by Validator.Validate for an event type that has
// no schema.
var ErrUnknownType = errors.New("schemas: no schema for event type")

// ErrInvalid wraps every validation failure, so callers can tell bad data
// from a missing schema with errors.Is.
var ErrInvalid = errors.New("schemas: data does not match its schema")

// Validator validates event payloads and records against the embedded
// schemas. It is safe for concurrent use.
type Validator struct {
	events map[string]*jsonschema.Schema // by CloudEvents type
	record *jsonschema.Schema
	passed *passedCache
}

var (
	defaultOnce sync.Once
	defaultV    *Validator
	defaultErr  error
)

// Default returns the validator over the embedded schemas, compiled once.
func Default() (*Validator, error) {
	defaultOnce.Do(func() { defaultV, defaultErr = NewValidator() })
	return defaultV, defaultErr
}

// NewValidator compiles every embedded schema. Formats (date-time) are
// asserted, not just annotated.
func NewValidator() (*Validator, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	var eventIDs []string
	err := fs.WalkDir(jsonFS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := jsonFS.ReadFile(p)
		if err != nil {
			return err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("schemas: %s: %w", p, err)
		}
		id := Base + p
		if err := c.AddResource(id, doc); err != nil {
			return fmt.Errorf("schemas: add %s: %w", p, err)
		}
		if strings.HasPrefix(p, "events/") {
			eventIDs = append(eventIDs, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	v := &Validator{events: make(map[string]*jsonschema.Schema, len(eventIDs)), passed: newPassedCache(passedCacheBytes)}
	for _, id := range eventIDs {
		sch, err := c.Compile(id)
		if err != nil {
			return nil, fmt.Errorf("schemas: compile %s: %w", id, err)
		}
		typ := strings.TrimSuffix(path.Base(id), ".json")
		v.events[typ] = sch
	}
	if v.record, err = c.Compile(RecordSchema); err != nil {
		return nil, fmt.Errorf("schemas: compile record schema: %w", err)
	}
	return v, nil
}

// EventTypes lists the event types that have a schema.
func (v *Validator) EventTypes() []string {
	out := make([]string, 0, len(v.events))
	for t := range v.events {
		out = append(out, t)
	}
	return out
}

// Validate checks the JSON data of an event of the given CloudEvents type.
//
// Data that passed once is not checked again: the validator remembers
// the exact bytes of the payloads that passed (see passedCache), so an
// event published and consumed in the same process, or consumed by
// several consumers there, is validated once. A remembered payload is
// recognised only by byte-for-byte equality with its type, never by a
// hash alone, and validation is a pure function of the two, so what
// passes from memory is exactly what would pass again.
func (v *Validator) Validate(eventType string, data []byte) error {
	sch, ok := v.events[eventType]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownType, eventType)
	}
	if v.passed.has(eventType, data) {
		return nil
	}
	if err := validate(sch, data); err != nil {
		return err
	}
	v.passed.add(eventType, data)
	return nil
}

// ValidateRecord checks the JSON of a submission record.
func (v *Validator) ValidateRecord(data []byte) error {
	return validate(v.record, data)
}

func validate(sch *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: not JSON: %w", ErrInvalid, err)
	}
	if err := sch.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("%w: %s", ErrInvalid, oneLine(ve))
		}
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// oneLine flattens the library's indented error tree to the leaf causes, so
// the message fits a log line and a dead-letter header.
func oneLine(ve *jsonschema.ValidationError) string {
	p := message.NewPrinter(language.English)
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			loc := "/" + strings.Join(e.InstanceLocation, "/")
			leaves = append(leaves, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(p)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(leaves) > 5 {
		leaves = append(leaves[:5], fmt.Sprintf("and %d more", len(leaves)-5))
	}
	return strings.Join(leaves, "; ")
}

// Example returns the first entry of the "examples" keyword of an event
// type's schema: a payload the schema's author vouches for. A new event
// type carries its sample there, beside its schema, so tests that walk the
// catalogue need nothing else.
func Example(eventType string) (json.RawMessage, bool) {
	raw, err := jsonFS.ReadFile("events/" + eventType + ".json")
	if err != nil {
		return nil, false
	}
	var s struct {
		Examples []json.RawMessage `json:"examples"`
	}
	if json.Unmarshal(raw, &s) != nil || len(s.Examples) == 0 {
		return nil, false
	}
	return s.Examples[0], true
}
