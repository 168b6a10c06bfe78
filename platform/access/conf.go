package access

import (
	"fmt"
	"strings"

	"github.com/lowbarena/lowbarena/events"
)

// Account is the account of the arena's users in the cluster's
// configuration (DeployConfig), with JetStream enabled. The embedded
// server of `arena up` keeps its users in the global account instead,
// where an existing data folder's streams are.
const Account = "ARENA"

// DeployConfig is the users part of a nats-server configuration file
// (deploy/nats/auth.conf, included by cluster.conf): the arena's account
// with JetStream, and in it every user of the table with its
// permissions. Each user's public nkey is read from the environment
// variable EnvPublicKey(user), which the server requires to be set.
func DeployConfig() string {
	var b strings.Builder
	b.WriteString(`# The arena's NATS users and their permissions, one user per service and
# the operator (the CLI). Generated from the permission table in
# platform/access; do not edit: after changing the table, run
#   go test ./platform/access -run TestDeployConfig -update
#
# Each user is an nkey: the server holds its public key, read from the
# environment (LOWBARENA_NKEY_<USER>; ` + "`arena credentials DIR`" + ` writes them all
# to DIR/nats.env, and each service's seed to DIR/<user>.env). A user
# may publish and subscribe only to the subjects listed; the server
# refuses the rest. Participants have no user: they go through the
# gateway's HTTP API.
accounts {
  ` + Account + ` {
    jetstream: enabled
    users: [
`)
	for _, u := range Users {
		p := u.Permissions()
		fmt.Fprintf(&b, "      # %s: %s\n", u.Name, u.Role)
		fmt.Fprintf(&b, "      {\n        nkey: $%s\n        permissions: {\n", EnvPublicKey(u.Name))
		fmt.Fprintf(&b, "          publish: { allow: %s }\n", confList(p.Publish, 10))
		fmt.Fprintf(&b, "          subscribe: { allow: %s }\n", confList(p.Subscribe, 10))
		if p.Responses {
			fmt.Fprintf(&b, "          allow_responses: { max: %d }\n", MaxResponses)
		}
		b.WriteString("        }\n      }\n")
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.String()
}

// confList writes subjects as a quoted list (quoted, so that a "$" is a
// subject's and never a variable reference), one per line.
func confList(subjects []string, indent int) string {
	pad := strings.Repeat(" ", indent)
	var b strings.Builder
	b.WriteString("[\n")
	for _, s := range subjects {
		fmt.Fprintf(&b, "%s  %q\n", pad, s)
	}
	b.WriteString(pad + "]")
	return b.String()
}

// Markdown is docs/operators/security.md's table of users: what each publishes, consumes,
// reads and writes, serves and asks.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| user | who | publishes | durable consumers | KV buckets | object stores | requests |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, u := range Users {
		var pubs []string
		for _, t := range u.Publishes {
			pubs = append(pubs, "`"+eventSubject(t)+"`")
		}
		for _, k := range u.Jobs {
			pubs = append(pubs, "`"+events.SubjectRootJobs+"."+k+".*`", "`"+events.SubjectRootJobs+"."+k+".*.*`")
		}
		var cons []string
		for _, c := range u.Consumers {
			cons = append(cons, "`"+c.Name+"`")
		}
		var reqs []string
		for _, sv := range u.Serves {
			reqs = append(reqs, "serves "+codeList(sv.Subjects))
		}
		if len(u.Calls) > 0 {
			reqs = append(reqs, "asks "+codeList(u.Calls))
		}
		if u.ReadsEvents {
			reqs = append(reqs, "reads ARENA messages by subject")
		}
		if u.ReadsJobs {
			reqs = append(reqs, "reads RUNNER_JOBS messages by subject")
		}
		if u.Operates {
			cons = append(cons, "reads every stream")
			reqs = append(reqs, "asks every service; creates and updates the arena's streams")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", u.Name, u.Role, orNone(strings.Join(pubs, " ")),
			orNone(strings.Join(cons, " ")), orNone(buckets(u.KV)), orNone(buckets(u.Objects)), orNone(strings.Join(reqs, "; ")))
	}
	return b.String()
}

func codeList(s []string) string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = "`" + v + "`"
	}
	return strings.Join(out, " ")
}

func buckets(bs []Bucket) string {
	var out []string
	for _, b := range bs {
		s := "`" + b.Name + "` " + b.Mode.String()
		if b.Keys != "" {
			s += " (keys `" + b.Keys + "`)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
