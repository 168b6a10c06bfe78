package score

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lowbarena/lowbarena/events/reason"
	"github.com/lowbarena/lowbarena/platform/ctl"
	"github.com/lowbarena/lowbarena/platform/store"
	"github.com/lowbarena/lowbarena/platform/store/query"
)

// sqlTimeout bounds one SQL request: the longest time limit a query may
// ask for, and room to answer.
const sqlTimeout = query.MaxTimeout + 15*time.Second

// ServeSQL runs the query service (ctl.ServiceQuery) on nc until ctx ends:
// `arena sql` sends ctl.SQLRequest on ctl.SubjectSQL and gets a
// ctl.SQLReply, or a refusal with query's stable reason (ctl.HeaderReason)
// and a sentence. It lives beside the scores because this component holds
// the store in every deployment; the store is only read, under
// readonly = 1.
func ServeSQL(ctx context.Context, nc *nats.Conn, st store.Store, log *slog.Logger) error {
	qs, err := query.New(st, 0)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	svc, err := micro.AddService(nc, micro.Config{Name: ctl.ServiceQuery, Version: "1.0.0",
		Description: "read-only SQL on the arena's store (arena sql): SELECT, SHOW, DESCRIBE and EXPLAIN under a time limit and a row cap"})
	if err != nil {
		return fmt.Errorf("query: micro service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	if err := ctl.Endpoint(ctx, svc, "sql", ctl.SubjectSQL, sqlTimeout, sqlHandler(qs, log)); err != nil {
		return fmt.Errorf("query: %w", err)
	}
	<-ctx.Done()
	return nil
}

// sqlHandler answers one SQL request with qs.
func sqlHandler(qs *query.Service, log *slog.Logger) func(context.Context, ctl.SQLRequest) (ctl.SQLReply, error) {
	return func(ctx context.Context, req ctl.SQLRequest) (ctl.SQLReply, error) {
		res, err := qs.Run(ctx, req.SQL, query.Options{MaxRows: req.MaxRows, Timeout: time.Duration(req.TimeoutSeconds) * time.Second})
		stmt := req.SQL
		if len(stmt) > 200 {
			stmt = stmt[:200] + "..."
		}
		var qe *query.Error
		if errors.As(err, &qe) {
			log.Info("sql refused", "reason", qe.Code, "sql", stmt)
			code := ctl.CodeBadRequest
			switch qe.Code {
			case reason.SQLBusy, reason.SQLNoStore:
				code = ctl.CodeUnavailable
			}
			return ctl.SQLReply{}, ctl.RefuseWith(code, qe.Code, "%s", qe.Message)
		}
		if err != nil {
			log.Warn("sql failed", "err", err, "sql", stmt)
			return ctl.SQLReply{}, err
		}
		log.Info("sql", "kind", res.Kind, "rows", len(res.Table.Rows), "truncated", res.Table.Cut, "elapsed", res.Elapsed, "sql", stmt)
		rep := ctl.SQLReply{Kind: res.Kind, Columns: make([]ctl.SQLColumn, len(res.Table.Columns)), Rows: res.Table.Rows,
			Truncated: res.Table.Cut, MaxRows: res.MaxRows, TimeoutSeconds: int(res.Timeout / time.Second),
			ElapsedMs: float64(res.Elapsed.Microseconds()) / 1000, Engine: res.Engine}
		for i, c := range res.Table.Columns {
			rep.Columns[i] = ctl.SQLColumn{Name: c.Name, Type: c.Type}
		}
		return rep, nil
	}
}
