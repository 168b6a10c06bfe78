package access

import (
	"fmt"
	"slices"

	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Permissions are one user's allow lists, in nats-server's terms: the
// subjects it may publish to and subscribe to (wildcards allowed), and
// whether it may answer the requests it receives (allow_responses: up to
// MaxResponses replies per request, to the request's reply subject). The
// server refuses every subject on neither list.
type Permissions struct {
	Publish   []string
	Subscribe []string
	Responses bool
}

// MaxResponses bounds the replies a service may send to one request: a
// reply of rows in chunks (ctl.RowsEndpoint: a leaderboard past one
// message's max_payload) is one message per chunk, so one reply, the
// server's default, would refuse every chunk after the first. 1,024
// chunks of 2 MiB hold 2 GiB of rows.
const MaxResponses = 1024

// JetStream API and protocol subjects a client touches.
const (
	jsAPI = "$JS.API."
	jsAck = "$JS.ACK."
	jsFC  = "$JS.FC."
)

// Permissions expands u's grants into subjects.
//
// What each grant allows, and why:
//   - every user: its own inboxes (replies to its requests, JetStream's
//     acknowledgements of its publishes, deliveries of its ephemeral
//     consumers) and the ARENA stream's info (runtime checks that the
//     arena is provisioned before it starts);
//   - an event type: its subjects (arena.<noun>.<verb>.<id>, and
//     .<kind>.<id> for the job outcomes that carry their kind);
//   - a job kind: jobs.<kind>.<id> on RUNNER_JOBS;
//   - a durable consumer: creating it (with its filter, when it has
//     one), its info, pulling from it, acking what it delivers, and
//     dead-lettering to dlq.<name>;
//   - a bucket read: its stream's info, direct gets of its keys, and
//     ephemeral ordered consumers on its keys (watch, list, object
//     chunks), with their flow control and clean-up;
//   - a bucket write: also publishing to its keys ($KV.<b>.<keys>,
//     $O.<b>.>) and, for object stores, purging (replacing or deleting
//     an object purges its old chunks);
//   - a service: its request subjects and micro's discovery subjects,
//     and replies to what it receives;
//   - a call: the request subject;
//   - reading events: the ARENA stream's message get;
//   - reading jobs: the RUNNER_JOBS stream's info and message get;
//   - operating: reading every arena stream, bucket and object store,
//     managing their consumers, the events as they flow, asking any
//     service, any inbox, and creating and updating the arena's streams
//     (never deleting or purging one).
func (u User) Permissions() Permissions {
	var p Permissions
	pub := func(s ...string) { p.Publish = append(p.Publish, s...) }
	sub := func(s ...string) { p.Subscribe = append(p.Subscribe, s...) }

	sub(InboxPrefix(u.Name) + ".>")
	pub(jsAPI + "STREAM.INFO." + events.StreamArena)

	for _, t := range u.Publishes {
		pub(eventSubject(t))
	}
	for _, k := range u.Jobs {
		// Shared (jobs.<kind>.<id>) and pinned to a pod
		// (jobs.<kind>.<id>.<pod>).
		pub(events.SubjectRootJobs+"."+k+".*", events.SubjectRootJobs+"."+k+".*.*")
	}
	for _, c := range u.Consumers {
		if c.PerPod {
			pub(jsAPI+"CONSUMER.CREATE."+c.Stream+".*."+c.Filters[0],
				jsAPI+"CONSUMER.INFO."+c.Stream+".*",
				jsAPI+"CONSUMER.MSG.NEXT."+c.Stream+".*",
				jsAck+c.Stream+".*.>",
				events.SubjectRootDLQ+"."+c.DeadLetterAs)
			continue
		}
		if len(c.Filters) == 1 {
			pub(jsAPI + "CONSUMER.CREATE." + c.Stream + "." + c.Name + "." + c.Filters[0])
		} else {
			pub(jsAPI + "CONSUMER.CREATE." + c.Stream + "." + c.Name)
		}
		pub(jsAPI+"CONSUMER.INFO."+c.Stream+"."+c.Name,
			jsAPI+"CONSUMER.MSG.NEXT."+c.Stream+"."+c.Name,
			jsAck+c.Stream+"."+c.Name+".>",
			events.SubjectRootDLQ+"."+c.Name)
	}
	for _, b := range u.KV {
		keys := b.Keys
		if keys == "" {
			keys = ">"
		}
		stream, prefix := KVStream(b.Name), "$KV."+b.Name+"."
		pub(readStream(stream, prefix+keys)...)
		if b.Mode == Write {
			pub(prefix + keys)
		}
	}
	for _, b := range u.Objects {
		stream, prefix := ObjectStream(b.Name), "$O."+b.Name+"."
		pub(readStream(stream, prefix+">")...)
		if b.Mode == Write {
			pub(prefix+">", jsAPI+"STREAM.PURGE."+stream)
		}
	}
	for _, s := range u.Serves {
		sub(s.Subjects...)
		sub("$SRV.PING", "$SRV.INFO", "$SRV.STATS", "$SRV.*."+s.Name, "$SRV.*."+s.Name+".*")
		p.Responses = true
	}
	pub(u.Calls...)
	if u.ReadsEvents {
		pub(jsAPI + "STREAM.MSG.GET." + events.StreamArena)
	}
	if u.ReadsJobs {
		pub(jsAPI+"STREAM.INFO."+events.StreamRunnerJobs, jsAPI+"STREAM.MSG.GET."+events.StreamRunnerJobs)
	}
	if u.Operates {
		for _, s := range Streams {
			pub(jsAPI+"STREAM.CREATE."+s, jsAPI+"STREAM.UPDATE."+s, jsAPI+"STREAM.INFO."+s,
				jsAPI+"STREAM.MSG.GET."+s, jsAPI+"DIRECT.GET."+s, jsAPI+"DIRECT.GET."+s+".>",
				jsAPI+"CONSUMER.CREATE."+s+".>", jsAPI+"CONSUMER.INFO."+s+".*", jsAPI+"CONSUMER.DELETE."+s+".*",
				jsAPI+"CONSUMER.NAMES."+s, jsAPI+"CONSUMER.LIST."+s,
				jsAPI+"CONSUMER.MSG.NEXT."+s+".*", jsAck+s+".>", jsFC+s+".>")
		}
		pub(jsAPI+"STREAM.NAMES", jsAPI+"STREAM.LIST", jsAPI+"INFO")
		pub(ctlRoot+".>", "$SRV.>")
		sub(events.SubjectRootArena+".>", "_INBOX.>")
	}
	p.Publish = dedupe(p.Publish)
	p.Subscribe = dedupe(p.Subscribe)
	return p
}

// ctlRoot is the first two tokens of every request subject of platform/ctl.
const ctlRoot = "lowbarena.ctl"

// readStream are the subjects that read the stream of a bucket or object
// store whose messages are on filter: its info, direct gets of those
// subjects, and ephemeral ordered consumers filtered to them (any name;
// nats.go names them), with flow control and deletion of what it
// created.
func readStream(stream, filter string) []string {
	return []string{
		jsAPI + "STREAM.INFO." + stream,
		jsAPI + "DIRECT.GET." + stream + "." + filter,
		jsAPI + "CONSUMER.CREATE." + stream + ".*." + filter,
		jsAPI + "CONSUMER.DELETE." + stream + ".*",
		jsFC + stream + ".>",
	}
}

// eventSubject is the subject pattern of every event of type t.
func eventSubject(t events.Type) string {
	s, ok := events.Lookup(t)
	if !ok {
		panic(fmt.Sprintf("access: %q is not in the catalogue", t))
	}
	if s.Stream != events.StreamArena {
		panic(fmt.Sprintf("access: %s is not an ARENA event; grant its job kinds instead", t))
	}
	root := events.SubjectRootArena + "." + s.Noun + "." + s.Verb
	if s.KindInSubject {
		return root + ".*.*"
	}
	return root + ".*"
}

func dedupe(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Allows reports whether p lets its user publish to subject.
func (p Permissions) Allows(subject string) bool {
	return slices.ContainsFunc(p.Publish, func(pat string) bool { return bus.MatchSubject(pat, subject) })
}

// MaySubscribe reports whether p lets its user subscribe to subject.
func (p Permissions) MaySubscribe(subject string) bool {
	return slices.ContainsFunc(p.Subscribe, func(pat string) bool { return bus.MatchSubject(pat, subject) })
}
