package ce

import (
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
)

// uris remembers the parsed form of the URI references events carry as
// their source and dataschema: an arena has a few dozen (one source per
// service, one schema per type), and every event repeats one of each, so
// decoding parses each once instead of once per event. It stops learning
// at maxURIs, so values from outside the arena cannot grow it without
// bound; past that they are parsed every time.
var uris struct {
	m sync.Map // string -> url.URL
	n atomic.Int64
}

const maxURIs = 1024

// parseURI is url.Parse, remembered.
func parseURI(s string) (url.URL, error) {
	if u, ok := uris.m.Load(s); ok {
		return u.(url.URL), nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return url.URL{}, err
	}
	if uris.n.Load() < maxURIs {
		if _, loaded := uris.m.LoadOrStore(s, *u); !loaded {
			uris.n.Add(1)
		}
	}
	return *u, nil
}

// setSource and setDataSchema set the attributes of a new event (no field
// error recorded yet) as the SDK's setters do, from remembered parses; a
// value that does not parse goes through the SDK's setter, which records
// the error for Validate.
func setSource(e *event.Event, s string) {
	ec, ok := e.Context.(*event.EventContextV1)
	if !ok {
		e.SetSource(s)
		return
	}
	u, err := parseURI(s)
	if err != nil {
		e.SetSource(s)
		return
	}
	ec.Source = types.URIRef{URL: u}
}

func setDataSchema(e *event.Event, s string) {
	ec, ok := e.Context.(*event.EventContextV1)
	if !ok || s == "" {
		e.SetDataSchema(s)
		return
	}
	u, err := parseURI(s)
	if err != nil {
		e.SetDataSchema(s)
		return
	}
	ec.DataSchema = &types.URI{URL: u}
}
