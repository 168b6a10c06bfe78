package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lowbarena/lowbarena/events/reason"
)

// A reply of rows (the leaderboard, the history, a rescore) is bounded by
// the server's max_payload when it is one message (2 MiB under `arena
// up`: about 8,000 rows). A Query with Chunked set is answered in as many
// messages as the rows need instead, each a Rows of whole rows within the
// connection's max_payload, in order, to the request's reply subject:
// every message carries HeaderChunk (0, 1, 2, ...) and the last one
// HeaderChunkLast too. The query runs once; the chunks are its rows cut
// in order, so the whole answer costs the query and the bytes, linear in
// the rows.
//
// The field and the headers are optional. A client that does not set
// Chunked gets one message (and, past max_payload, a refusal with
// reason.ReplyTooLarge instead of a failed publish); a responder that does
// not chunk answers one message without HeaderChunk, which CallRows takes
// as the whole answer.
const (
	HeaderChunk     = "Lowbarena-Chunk"
	HeaderChunkLast = "Lowbarena-Chunk-Last"
)

// chunkHeadroom is what a chunk leaves of max_payload for its headers
// (max_payload counts them): the two chunk headers and NATS's own.
const chunkHeadroom = 1024

// RowsEndpoint adds an endpoint answering a Query with rows, as Endpoint
// does, in chunks when the query asks for them. chunkBytes bounds a
// chunk's body (at most, and by default when 0 or less, the connection's
// max_payload less room for the headers).
func RowsEndpoint(ctx context.Context, svc micro.Service, nc *nats.Conn, name, subject string, timeout time.Duration, chunkBytes int,
	fn func(context.Context, Query) ([]Row, error)) error {
	h := micro.HandlerFunc(func(r micro.Request) {
		var q Query
		if len(r.Data()) > 0 {
			if err := json.Unmarshal(r.Data(), &q); err != nil {
				_ = r.Error(CodeBadRequest, "the request does not decode: "+err.Error(), nil)
				return
			}
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		rows, err := fn(rctx, q)
		if err != nil {
			respondError(r, err)
			return
		}
		limit := int(nc.MaxPayload()) - chunkHeadroom
		if chunkBytes > 0 {
			limit = min(limit, chunkBytes)
		}
		chunks, err := cutRows(rows, limit)
		if err != nil {
			_ = r.Error(CodeInternal, err.Error(), nil)
			return
		}
		if !q.Chunked {
			if len(chunks) > 1 {
				_ = r.Error(CodeBadRequest, fmt.Sprintf("the %d rows of this answer do not fit one reply of %d bytes (the NATS server's max_payload): ask for them in chunks (Query.Chunked; arena leaderboard and history do)",
					len(rows), nc.MaxPayload()), nil, micro.WithHeaders(micro.Headers{HeaderReason: {string(reason.ReplyTooLarge)}}))
				return
			}
			_ = r.Respond(chunks[0])
			return
		}
		for i, c := range chunks {
			hd := micro.Headers{HeaderChunk: {strconv.Itoa(i)}}
			if i == len(chunks)-1 {
				hd[HeaderChunkLast] = []string{"true"}
			}
			if err := r.Respond(c, micro.WithHeaders(hd)); err != nil {
				// The client then misses the last chunk and says so.
				return
			}
		}
	})
	if err := svc.AddEndpoint(name, h, micro.WithEndpointSubject(subject)); err != nil {
		return fmt.Errorf("ctl: endpoint %s on %s: %w", name, subject, err)
	}
	return nil
}

// respondError answers err as Endpoint does: an *Error with its code and
// reason, anything else a 500.
func respondError(r micro.Request, err error) {
	code := CodeInternal
	var opts []micro.RespondOpt
	var e *Error
	if errors.As(err, &e) {
		code = e.Code
		if e.Reason != "" {
			opts = append(opts, micro.WithHeaders(micro.Headers{HeaderReason: {string(e.Reason)}}))
		}
	}
	_ = r.Error(code, err.Error(), nil, opts...)
}

// cutRows encodes rows as Rows bodies of at most limit bytes each, whole
// rows in order; no rows is one body with none. A row that alone does not
// fit is an error.
func cutRows(rows []Row, limit int) ([][]byte, error) {
	const open, sep, end = `{"rows":[`, ",", `]}`
	var out [][]byte
	cur := bytes.NewBufferString(open)
	n := 0
	for i := range rows {
		b, err := json.Marshal(&rows[i])
		if err != nil {
			return nil, fmt.Errorf("ctl: encode row %d: %w", i, err)
		}
		if len(open)+len(b)+len(end) > limit {
			return nil, fmt.Errorf("ctl: row %d (%s) is %d bytes, more than a reply of %d bytes holds", i, rows[i].SubmissionID, len(b), limit)
		}
		if n > 0 && cur.Len()+len(sep)+len(b)+len(end) > limit {
			cur.WriteString(end)
			out = append(out, cur.Bytes())
			cur, n = bytes.NewBufferString(open), 0
		}
		if n > 0 {
			cur.WriteString(sep)
		}
		cur.Write(b)
		n++
	}
	cur.WriteString(end)
	return append(out, cur.Bytes()), nil
}

// CallRows asks subject for the rows of q in chunks (q.Chunked is set)
// and gathers them in order. Its errors are Call's, and an *Error with
// reason.ReplyIncomplete when a chunk is missing.
func CallRows(ctx context.Context, nc *nats.Conn, subject string, q Query) ([]Row, error) {
	q.Chunked = true
	body, err := json.Marshal(q)
	if err != nil {
		return nil, fmt.Errorf("ctl: encode request: %w", err)
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("ctl: %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The chunks come as fast as the service sends them; hold up to
	// 256 MiB of them rather than drop one (a dropped chunk fails the
	// call: see reason.ReplyIncomplete).
	if err := sub.SetPendingLimits(-1, 256<<20); err != nil {
		return nil, fmt.Errorf("ctl: %s: %w", subject, err)
	}
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return nil, fmt.Errorf("ctl: %s: %w", subject, err)
	}
	rows := []Row{}
	for next := 0; ; next++ {
		msg, err := sub.NextMsgWithContext(ctx)
		if next == 0 && errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w on %s (is the arena up?)", ErrNoService, subject)
		}
		if err != nil {
			if next > 0 {
				return nil, &Error{Code: CodeUnavailable, Reason: reason.ReplyIncomplete,
					Message: fmt.Sprintf("the reply of %s stopped after %d chunks (%d rows), before its last: %v; ask again", subject, next, len(rows), err)}
			}
			return nil, fmt.Errorf("ctl: %s: %w", subject, err)
		}
		if err := replyError(msg); err != nil {
			return nil, err
		}
		seq := msg.Header.Get(HeaderChunk)
		if next == 0 && seq == "" {
			// A service that does not chunk: its one reply is the answer.
			var rep Rows
			if err := json.Unmarshal(msg.Data, &rep); err != nil {
				return nil, fmt.Errorf("ctl: decode the reply of %s: %w", subject, err)
			}
			return rep.Rows, nil
		}
		if seq != strconv.Itoa(next) {
			return nil, &Error{Code: CodeUnavailable, Reason: reason.ReplyIncomplete,
				Message: fmt.Sprintf("the reply of %s lost a chunk (chunk %q came where %d was due): ask again", subject, seq, next)}
		}
		var rep Rows
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			return nil, fmt.Errorf("ctl: decode chunk %d of the reply of %s: %w", next, subject, err)
		}
		rows = append(rows, rep.Rows...)
		if msg.Header.Get(HeaderChunkLast) != "" {
			return rows, nil
		}
	}
}

// CallRowsWaiting is CallRows, asked again while no service answers, for
// up to wait, as CallWaiting.
func CallRowsWaiting(ctx context.Context, nc *nats.Conn, subject string, q Query, wait time.Duration) ([]Row, error) {
	var rows []Row
	err := whileNoService(ctx, wait, func() error {
		var err error
		rows, err = CallRows(ctx, nc, subject, q)
		return err
	})
	return rows, err
}
