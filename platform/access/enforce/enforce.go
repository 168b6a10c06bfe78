// Package enforce puts the permission table (package access) on an
// embedded nats-server: one nkey user per user of the table with its
// allow lists, and a server logger that counts every violation the server
// refuses (a publish or subscription outside a user's permissions, a
// connection with wrong credentials) in lowbarena.nats.violations, where
// the arena sees them, whichever client tried.
package enforce

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/access"
)

// Permissions is p in nats-server's terms.
func Permissions(p access.Permissions) *server.Permissions {
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: append([]string(nil), p.Publish...)},
		Subscribe: &server.SubjectPermission{Allow: append([]string(nil), p.Subscribe...)},
	}
	if p.Responses {
		// Up to MaxResponses replies per request (the chunks of a reply
		// of rows), within the server's default window.
		sp.Response = &server.ResponsePermission{MaxMsgs: access.MaxResponses}
	}
	return sp
}

// Users are the table's users as nkey users of the global account, each
// with its permissions, their public keys from creds.
func Users(creds *access.Credentials) ([]*server.NkeyUser, error) {
	out := make([]*server.NkeyUser, 0, len(access.Users))
	for _, u := range access.Users {
		pub := creds.Public(u.Name)
		if pub == "" {
			return nil, fmt.Errorf("enforce: no credentials for user %s in %s", u.Name, creds.Dir)
		}
		out = append(out, &server.NkeyUser{Nkey: pub, Permissions: Permissions(u.Permissions())})
	}
	return out, nil
}

// Configure sets opts' users from creds: every connection must then
// present one of the table's nkeys, and may do only what its user may.
func Configure(opts *server.Options, creds *access.Credentials) error {
	users, err := Users(creds)
	if err != nil {
		return err
	}
	opts.Nkeys = users
	opts.Users = nil
	opts.NoAuthUser = ""
	return nil
}

// Violation kinds, the op attribute of lowbarena.nats.violations.
const (
	OpPublish   = "publish"
	OpSubscribe = "subscribe"
	OpReply     = "reply"
	OpAuth      = "auth"
)

// Log is a nats-server logger: it counts the violations the server logs
// in lowbarena.nats.violations{user, op} and logs each with its user and
// subject, and passes the server's other errors and warnings to a slog
// logger (notices at debug).
type Log struct {
	log        *slog.Logger
	users      map[string]string // public nkey -> user
	violations metric.Int64Counter
}

// NewLog returns a Log that names users by their keys in creds (nil:
// every user is "unknown"), counting with mp (nil: the otel global).
func NewLog(log *slog.Logger, creds *access.Credentials, mp metric.MeterProvider) (*Log, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if log == nil {
		log = slog.Default()
	}
	l := &Log{log: log, users: map[string]string{}}
	if creds != nil {
		for _, u := range access.Users {
			l.users[creds.Public(u.Name)] = u.Name
		}
	}
	var err error
	l.violations, err = mp.Meter("github.com/lowbarena/lowbarena/platform/access/enforce").Int64Counter("lowbarena.nats.violations",
		metric.WithUnit("{violation}"),
		metric.WithDescription("Publishes, subscriptions and connections the NATS server refused, by user and op (publish, subscribe, reply, auth)."))
	if err != nil {
		return nil, fmt.Errorf("enforce: %w", err)
	}
	return l, nil
}

// Install makes l the logger of s (without debug or trace lines).
func (l *Log) Install(s *server.Server) { s.SetLoggerV2(l, false, false, false) }

// What the server's log lines say, as nats-server v2.15 writes them
// (server/client.go: pubPermissionViolation, subPermissionViolation,
// replySubjectViolation, authViolation). The enforce tests hold these
// to the server the arena links.
var (
	rePublish   = regexp.MustCompile(`Publish Violation - Subject "((?:[^"\\]|\\.)*)"`)
	reReply     = regexp.MustCompile(`Publish Violation - Reply "((?:[^"\\]|\\.)*)"`)
	reSubscribe = regexp.MustCompile(`Subscription Violation(?: Too Many Tokens)? - Subject "((?:[^"\\]|\\.)*)"`)
	reAuth      = regexp.MustCompile(`authentication error`)
	// The client's label: "<account>/nkey:<key>" once authenticated, or
	// Nkey "<key>" / User "<name>" in an authentication error.
	reNkeyLabel = regexp.MustCompile(`/nkey:(U[A-Z2-7]+)"`)
	reUserLabel = regexp.MustCompile(`/user:([^"]+)"`)
	reAuthNkey  = regexp.MustCompile(`Nkey "(U[A-Z2-7]+)"`)
	reAuthUser  = regexp.MustCompile(`User "([^"]*)"`)
)

// Errorf counts and logs a violation, or passes the line on as an error.
func (l *Log) Errorf(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	op, subject := "", ""
	if m := rePublish.FindStringSubmatch(line); m != nil {
		op, subject = OpPublish, m[1]
	} else if m := reReply.FindStringSubmatch(line); m != nil {
		op, subject = OpReply, m[1]
	} else if m := reSubscribe.FindStringSubmatch(line); m != nil {
		op, subject = OpSubscribe, m[1]
	} else if reAuth.MatchString(line) {
		op = OpAuth
	}
	if op == "" {
		l.log.Error("nats-server: " + line)
		return
	}
	user := l.user(line, op)
	l.violations.Add(context.Background(), 1, metric.WithAttributes(attribute.String("user", user), attribute.String("op", op)))
	code := reason.PermissionDenied
	if op == OpAuth {
		code = reason.NATSAuthFailed
	}
	l.log.Warn("NATS refused", "user", user, "op", op, "subject", subject, "reason", code, "line", line)
}

// user names the client of a violation line.
func (l *Log) user(line, op string) string {
	var key string
	if m := reNkeyLabel.FindStringSubmatch(line); m != nil {
		key = m[1]
	} else if m := reAuthNkey.FindStringSubmatch(line); op == OpAuth && m != nil {
		key = m[1]
	} else if m := reUserLabel.FindStringSubmatch(line); m != nil {
		return "user:" + m[1]
	} else if m := reAuthUser.FindStringSubmatch(line); m != nil && m[1] != "N/A" {
		return "user:" + m[1]
	}
	if name, ok := l.users[key]; ok && key != "" {
		return name
	}
	return "unknown"
}

// Warnf logs a server warning.
func (l *Log) Warnf(format string, v ...any) { l.log.Warn("nats-server: " + fmt.Sprintf(format, v...)) }

// Fatalf logs a fatal server error (the server stops itself).
func (l *Log) Fatalf(format string, v ...any) {
	l.log.Error("nats-server: " + fmt.Sprintf(format, v...))
}

// Noticef logs a server notice at debug level.
func (l *Log) Noticef(format string, v ...any) {
	l.log.Debug("nats-server: " + strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// Debugf logs a server debug line at debug level.
func (l *Log) Debugf(format string, v ...any) {
	l.log.Debug("nats-server: " + fmt.Sprintf(format, v...))
}

// Tracef drops trace lines (never enabled).
func (l *Log) Tracef(string, ...any) {}
