// Package reason is the arena's catalogue of reason codes: the stable
// snake_case codes a participant or an operator sees when the arena
// refuses or fails something (in a <stage>.failed event, a record, an
// HTTP error body, a control reply, a dead-lettered message).
//
// The catalogue is data: reasons.json holds one entry per code (its
// string, Go name, description and the services that give it), and go
// generate writes reasons_generated.go and docs/reasons.md from it, as
// nats-server keeps its errors.json. A code is never renamed or removed,
// only added: records, dashboards and participants' scripts match on
// them. To add one, add its entry to reasons.json (sorted by code) and
// run go generate ./events/reason.
//
// The package imports nothing of the arena's, so the domain, the
// adapters, the platform and every service may use it.
package reason

//go:generate go run gen.go

// Code is a reason code: stable, snake_case, for machines.
type Code string

// String returns the code as it appears on the wire.
func (c Code) String() string { return string(c) }

// Info describes one code of the catalogue.
type Info struct {
	// Code is the code itself.
	Code Code
	// Name is its Go constant's name in this package.
	Name string
	// Description says what it means, in a sentence a participant or an
	// operator can act on.
	Description string
	// GivenBy names the services or tools that give it.
	GivenBy []string
	// HTTPStatus is the status the gateway answers it with, or zero.
	HTTPStatus int
}

// All returns every code of the catalogue, sorted by code.
func All() []Info {
	out := make([]Info, len(catalogue))
	copy(out, catalogue)
	return out
}

// Describe returns the catalogue's entry for c, and whether it has one.
func Describe(c Code) (Info, bool) {
	i, ok := index[c]
	if !ok {
		return Info{}, false
	}
	return catalogue[i], true
}

// Known reports whether c is a code of the catalogue.
func Known(c Code) bool {
	_, ok := index[c]
	return ok
}

var index = func() map[Code]int {
	m := make(map[Code]int, len(catalogue))
	for i, e := range catalogue {
		m[e.Code] = i
	}
	return m
}()
