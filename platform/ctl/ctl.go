// Package ctl is the arena's request and reply vocabulary beside its event
// catalogue: the subjects, request and reply types of the services'
// nats.go/micro endpoints (score's leaderboard, history, rescore and
// standing; round's start and list; query's read-only SQL), a typed
// endpoint helper for the
// services and a typed client for the CLI and for other services.
//
// Requests are core NATS request-reply, outside every stream. Each service
// answers in a queue group (several instances share the load) and is
// visible to `nats micro ls` through $SRV.PING, $SRV.INFO and $SRV.STATS.
// An error travels in micro's service-error headers (Nats-Service-Error
// and Nats-Service-Error-Code) with a sentence for people, never in the
// body.
package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lowbarena/lowbarena/domain/record"
	"github.com/lowbarena/lowbarena/events"
	"github.com/lowbarena/lowbarena/events/reason"
)

// Service names (micro service names) and the request subjects they
// answer.
const (
	ServiceScore = "score"
	ServiceRound = "round"

	SubjectRescore     = "lowbarena.ctl.rescore"
	SubjectLeaderboard = "lowbarena.ctl.leaderboard"
	SubjectHistory     = "lowbarena.ctl.history"
	SubjectStanding    = "lowbarena.ctl.score.standing"

	SubjectRoundStart = "lowbarena.ctl.round.start"
	SubjectRoundList  = "lowbarena.ctl.round.list"

	// ServiceQuery answers read-only SQL on the store (`arena sql`).
	ServiceQuery = "query"
	SubjectSQL   = "lowbarena.ctl.sql"
)

// SQLRequest is `arena sql`: one read-only statement and its limits (zero:
// the service's defaults).
type SQLRequest struct {
	SQL            string `json:"sql"`
	MaxRows        int    `json:"max_rows,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
}

// SQLColumn is one column of an SQLReply: its name and ClickHouse type.
type SQLColumn struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// SQLReply is a statement's answer: its kind (select, show, describe,
// explain), the columns and each row's values as ClickHouse's JSON writes
// them (numbers unquoted, 64-bit integers too; dates, NaN and infinities
// as strings). Truncated says the rows stop at a limit ("rows": MaxRows;
// "bytes": the size of one answer), "" when they are the whole result.
type SQLReply struct {
	Kind           string              `json:"kind"`
	Columns        []SQLColumn         `json:"columns"`
	Rows           [][]json.RawMessage `json:"rows"`
	Truncated      string              `json:"truncated,omitempty"`
	MaxRows        int                 `json:"max_rows"`
	TimeoutSeconds int                 `json:"timeout_seconds"`
	ElapsedMs      float64             `json:"elapsed_ms"`
	Engine         string              `json:"engine"`
}

// Query asks the score service for scores: the leaderboard, history or a
// rescore.
type Query struct {
	Policy      string    `json:"policy,omitempty"`
	Since       time.Time `json:"since,omitempty"`
	Campaign    string    `json:"campaign,omitempty"`
	Participant string    `json:"participant,omitempty"`
	Model       string    `json:"model,omitempty"`
	// Chunked asks for the rows in as many replies as they need (see
	// HeaderChunk); CallRows sets it.
	Chunked bool `json:"chunked,omitempty"`
}

// Row is one score as the CLI shows it (a row of the scores table).
type Row struct {
	TsMs         uint64  `ch:"ts_ms" json:"ts_ms"`
	SubmissionID string  `ch:"submission_id" json:"submission_id"`
	Policy       string  `ch:"policy" json:"policy"`
	Campaign     string  `ch:"campaign" json:"campaign"`
	Participant  string  `ch:"participant" json:"participant"`
	Method       string  `ch:"method" json:"method"`
	Split        string  `ch:"split" json:"split"`
	Score        float64 `ch:"score" json:"score"`
	Gain         float64 `ch:"efficiency_gain" json:"efficiency_gain"`
	Drift        float64 `ch:"drift" json:"drift"`
	Qualified    uint8   `ch:"qualified" json:"qualified"`
	Ranked       uint8   `ch:"ranked" json:"ranked"`
	Reason       string  `ch:"reason" json:"reason"`
}

// Rows answers a Query.
type Rows struct {
	Rows []Row `json:"rows"`
}

// StandingRequest asks the score service what it knows of a submission.
type StandingRequest struct {
	SubmissionID string `json:"submission_id"`
}

// Standing is what the score service knows of a submission, from the
// events it joined (never from the gateway's record): who submitted it,
// the bundle its kept contract names, the KV dtype its engine ran and its
// dev score once every outcome is in. Round asks for it before entering a
// submission and again to score the entry.
type Standing struct {
	SubmissionID string `json:"submission_id"`
	Participant  string `json:"participant,omitempty"`
	Method       string `json:"method,omitempty"`
	Split        string `json:"split,omitempty"`
	// Campaign is the submission's task.
	Campaign string `json:"campaign,omitempty"`
	// ContractKept says contract.completed arrived; Artifact and
	// BundleDigest are the bundle it checked.
	ContractKept bool              `json:"contract_kept"`
	Artifact     *events.BundleRef `json:"artifact,omitempty"`
	BundleDigest string            `json:"bundle_digest,omitempty"`
	// KVCacheDType is the KV dtype the engine reported running in the
	// efficiency stage, or the declared one before that.
	KVCacheDType string `json:"kv_cache_dtype,omitempty"`
	// Patch is the engine patch its kept contract checked (the engine
	// track): a round serves the entry on the campaign's engine built
	// with it, as the efficiency stage measured it.
	Patch *record.Patch `json:"patch,omitempty"`
	// Pending names the outcomes not in yet ("contract", "quality",
	// "efficiency").
	Pending []string `json:"pending"`
	// Score is the dev score under the service's policy once every
	// outcome is in; Failed is the reason it could not be scored.
	Score  *record.Score `json:"score,omitempty"`
	Failed string        `json:"failed,omitempty"`
	// AuditVerdict is the verdict of the engine's audits once the
	// efficiency outcome is in (pass, fail, skipped); AuditReason the
	// failed audit's code. A failed audit leaves Score unqualified with
	// the audit's sentence as its reason, in rounds too.
	AuditVerdict string `json:"audit_verdict,omitempty"`
	AuditReason  string `json:"audit_reason,omitempty"`
}

// StartRequest is `arena round start`.
type StartRequest struct {
	Campaign   string   `json:"campaign"`
	Candidates []string `json:"candidates"`
	Pod        string   `json:"pod,omitempty"`
}

// StartReply is its answer: the round started.
type StartReply struct {
	RoundID string `json:"round_id"`
	Steps   int    `json:"steps"`
}

// ListRequest asks for the rounds of a campaign ("" for all).
type ListRequest struct {
	Campaign string `json:"campaign,omitempty"`
}

// Summary is one round's result, for people.
type Summary struct {
	RoundID   string                     `json:"round_id"`
	Campaign  string                     `json:"campaign"`
	Pod       string                     `json:"pod"`
	Status    string                     `json:"status"`
	StartedAt time.Time                  `json:"started_at"`
	Steps     int                        `json:"steps"`
	Reached   int                        `json:"reached,omitempty"`
	Result    *events.RoundCompletedData `json:"result,omitempty"`
	Reason    string                     `json:"reason,omitempty"`
}

// ListReply answers a ListRequest, oldest round first.
type ListReply struct {
	Rounds []Summary `json:"rounds"`
}

// Error codes of a refused request, in micro's Nats-Service-Error-Code
// header (HTTP's numbers, as the micro examples use them).
const (
	CodeBadRequest  = "400"
	CodeNotFound    = "404"
	CodeConflict    = "409"
	CodeUnavailable = "503"
	CodeInternal    = "500"
)

// HeaderReason carries a refusal's stable snake_case reason (for example
// sql_not_read_only) beside micro's numeric code, when it has one.
const HeaderReason = "Lowbarena-Reason"

// Error is a refused request: a code, a sentence for people and, when the
// service gives one, a stable snake_case reason.
type Error struct {
	Code    string
	Reason  reason.Code
	Message string
}

func (e *Error) Error() string { return e.Message }

// Refuse returns a refusal with code and a sentence.
func Refuse(code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// RefuseWith returns a refusal with code, a stable reason and a sentence.
func RefuseWith(code string, why reason.Code, format string, args ...any) error {
	return &Error{Code: code, Reason: why, Message: fmt.Sprintf(format, args...)}
}

// Endpoint adds a JSON endpoint named name on subject to svc: the request
// body decodes into Req, fn's answer is the reply body, and an error is
// answered in the service-error headers (an *Error with its code,
// anything else as 500) with an empty body. fn runs under ctx, bounded by
// timeout.
func Endpoint[Req, Rep any](ctx context.Context, svc micro.Service, name, subject string, timeout time.Duration,
	fn func(context.Context, Req) (Rep, error)) error {
	h := micro.HandlerFunc(func(r micro.Request) {
		var req Req
		if len(r.Data()) > 0 {
			if err := json.Unmarshal(r.Data(), &req); err != nil {
				_ = r.Error(CodeBadRequest, "the request does not decode: "+err.Error(), nil)
				return
			}
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		rep, err := fn(rctx, req)
		if err != nil {
			respondError(r, err)
			return
		}
		if err := r.RespondJSON(rep); err != nil {
			_ = r.Error(CodeInternal, "the reply does not encode: "+err.Error(), nil)
		}
	})
	if err := svc.AddEndpoint(name, h, micro.WithEndpointSubject(subject)); err != nil {
		return fmt.Errorf("ctl: endpoint %s on %s: %w", name, subject, err)
	}
	return nil
}

// ErrNoService is returned by Call when no service answers the subject.
var ErrNoService = errors.New("no service answers")

// Call sends req to subject and decodes the reply into Rep. A refusal
// comes back as an *Error with the service's code and sentence; no
// responder as ErrNoService.
func Call[Rep any](ctx context.Context, nc *nats.Conn, subject string, req any) (Rep, error) {
	var rep Rep
	body, err := json.Marshal(req)
	if err != nil {
		return rep, fmt.Errorf("ctl: encode request: %w", err)
	}
	msg, err := nc.RequestWithContext(ctx, subject, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return rep, fmt.Errorf("%w on %s (is the arena up?)", ErrNoService, subject)
	}
	if err != nil {
		return rep, fmt.Errorf("ctl: %s: %w", subject, err)
	}
	if err := replyError(msg); err != nil {
		return rep, err
	}
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return rep, fmt.Errorf("ctl: decode the reply of %s: %w", subject, err)
	}
	return rep, nil
}

// CallWaiting is Call, asked again while no service answers the subject,
// for up to wait: a service that is restarting (a crash, a rolling
// deploy, a node of the cluster electing its leaders) answers a moment
// later, and a person's command should not fail for that moment. Only
// ErrNoService is asked again: nobody received the request, so asking
// again cannot do anything twice. Any other error, a refusal, or
// ErrNoService past wait is returned as Call returns it.
func CallWaiting[Rep any](ctx context.Context, nc *nats.Conn, subject string, req any, wait time.Duration) (Rep, error) {
	var rep Rep
	err := whileNoService(ctx, wait, func() error {
		var err error
		rep, err = Call[Rep](ctx, nc, subject, req)
		return err
	})
	return rep, err
}

// whileNoService calls call again while it answers ErrNoService, for up
// to wait, and returns its last error.
func whileNoService(ctx context.Context, wait time.Duration, call func() error) error {
	deadline := time.Now().Add(wait)
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		err := call()
		if !errors.Is(err, ErrNoService) || time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
	}
}

// replyError is the refusal a reply carries in micro's error headers, or
// nil.
func replyError(msg *nats.Msg) error {
	if desc := msg.Header.Get(micro.ErrorHeader); desc != "" || msg.Header.Get(micro.ErrorCodeHeader) != "" {
		code := msg.Header.Get(micro.ErrorCodeHeader)
		if _, err := strconv.Atoi(code); err != nil {
			code = CodeInternal
		}
		return &Error{Code: code, Reason: reason.Code(msg.Header.Get(HeaderReason)), Message: desc}
	}
	return nil
}
