package chstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/lowbarena/lowbarena/platform/store"
)

// QueryTable implements store.Tabler. The limits go in a SETTINGS clause
// appended to the statement on a line of its own (readonly and
// max_execution_time): query settings sent beside the statement in the
// native protocol arrive garbled at an 18.16 server (max_execution_time 7
// reads as 16), while the clause works on every version. SHOW and
// DESCRIBE, which take no SETTINGS clause on 18.16, run without one: they
// read the catalogue only. ctx gets a deadline a few seconds past the time
// limit, so a statement the server does not stop is cancelled too. Rows
// are read as the server streams them and cut at the limits; closing the
// rows then ends the statement.
func (st *Store) QueryTable(ctx context.Context, query string, lim store.Limits) (*store.Table, error) {
	if err := lim.Check(); err != nil {
		return nil, err
	}
	end, err := st.begin()
	if err != nil {
		return nil, err
	}
	defer end()
	readonly := 0
	if lim.ReadOnly {
		readonly = 1
	}
	q := query
	if !catalogueRead(query) {
		q = fmt.Sprintf("%s\nSETTINGS readonly = %d, max_execution_time = %d", query, readonly, lim.MaxSeconds)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(lim.MaxSeconds)*time.Second+5*time.Second)
	defer cancel()
	rows, err := st.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("store: clickhouse: %w (statement: %s)", err, head(query))
	}
	defer rows.Close()
	t, err := tableOf(rows, lim)
	if err != nil {
		return nil, fmt.Errorf("store: clickhouse: %w (statement: %s)", err, head(query))
	}
	return t, nil
}

// catalogueRead reports whether a statement starts with SHOW, DESC or
// DESCRIBE.
func catalogueRead(q string) bool {
	f := strings.Fields(q)
	if len(f) == 0 {
		return false
	}
	switch strings.ToUpper(f[0]) {
	case "SHOW", "DESC", "DESCRIBE":
		return true
	}
	return false
}

// tableOf reads rows into a table under lim.
func tableOf(rows driver.Rows, lim store.Limits) (*store.Table, error) {
	names := rows.Columns()
	types := rows.ColumnTypes()
	cols := make([]store.Column, len(names))
	targets := make([]any, len(names))
	for i, ct := range types {
		cols[i] = store.Column{Name: names[i], Type: ct.DatabaseTypeName()}
		targets[i] = reflect.New(ct.ScanType()).Interface()
	}
	b := store.NewTableBuilder(cols, lim)
	for n := 1; rows.Next(); n++ {
		if err := rows.Scan(targets...); err != nil {
			return nil, fmt.Errorf("scan row %d: %w", n, err)
		}
		row := make([]json.RawMessage, len(targets))
		for i, p := range targets {
			v, err := jsonValue(reflect.ValueOf(p).Elem(), cols[i].Type)
			if err != nil {
				return nil, fmt.Errorf("row %d column %s: %w", n, names[i], err)
			}
			row[i] = v
		}
		if !b.Add(row) {
			return &b.T, nil
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return &b.T, nil
}

// jsonValue writes a value clickhouse-go scanned for a column of type typ
// as chDB's JSON output writes it (see store.Table).
func jsonValue(v reflect.Value, typ string) (json.RawMessage, error) {
	inner := typ
	for _, wrap := range []string{"Nullable(", "LowCardinality("} {
		if s, ok := strings.CutPrefix(inner, wrap); ok {
			inner = strings.TrimSuffix(s, ")")
		}
	}
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return json.RawMessage("null"), nil
		}
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case time.Time:
		return jsonString(formatTime(x, inner)), nil
	case decimal.Decimal:
		return json.RawMessage(x.String()), nil
	case big.Int:
		return json.RawMessage(x.String()), nil
	case uuid.UUID:
		return jsonString(x.String()), nil
	case net.IP:
		return jsonString(x.String()), nil
	case json.RawMessage:
		return x, nil
	}
	switch v.Kind() {
	case reflect.Bool:
		return json.RawMessage(strconv.FormatBool(v.Bool())), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return json.RawMessage(strconv.FormatInt(v.Int(), 10)), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return json.RawMessage(strconv.FormatUint(v.Uint(), 10)), nil
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		switch {
		case math.IsNaN(f):
			return jsonString("nan"), nil
		case math.IsInf(f, 1):
			return jsonString("inf"), nil
		case math.IsInf(f, -1):
			return jsonString("-inf"), nil
		}
		bits := 64
		if v.Kind() == reflect.Float32 {
			bits = 32
		}
		return json.RawMessage(strconv.FormatFloat(f, 'g', -1, bits)), nil
	case reflect.String:
		return jsonString(v.String()), nil
	case reflect.Slice, reflect.Array:
		// Array(T) (an Array(UInt8) too: a String scans as a string).
		elem := strings.TrimSuffix(strings.TrimPrefix(inner, "Array("), ")")
		out := []byte{'['}
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				out = append(out, ',')
			}
			e, err := jsonValue(v.Index(i), elem)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out = append(out, e...)
		}
		return append(out, ']'), nil
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i].Interface()) < fmt.Sprint(keys[j].Interface()) })
		out := []byte{'{'}
		for i, k := range keys {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, jsonString(fmt.Sprint(k.Interface()))...)
			out = append(out, ':')
			e, err := jsonValue(v.MapIndex(k), "")
			if err != nil {
				return nil, fmt.Errorf("key %v: %w", k.Interface(), err)
			}
			out = append(out, e...)
		}
		return append(out, '}'), nil
	}
	raw, err := json.Marshal(v.Interface())
	if err != nil {
		return jsonString(fmt.Sprint(v.Interface())), nil
	}
	return raw, nil
}

// formatTime writes a Date, DateTime or DateTime64(p) as ClickHouse does,
// in the time's own location (the column's time zone).
func formatTime(t time.Time, typ string) string {
	switch {
	case strings.HasPrefix(typ, "Date32"), typ == "Date":
		return t.Format("2006-01-02")
	case strings.HasPrefix(typ, "DateTime64("):
		p := 3
		if s, _, ok := strings.Cut(strings.TrimPrefix(typ, "DateTime64("), ","); ok {
			p, _ = strconv.Atoi(strings.TrimSpace(s))
		} else if n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(typ, "DateTime64("), ")")); err == nil {
			p = n
		}
		layout := "2006-01-02 15:04:05"
		if p > 0 {
			layout += "." + strings.Repeat("0", p)
		}
		return t.Format(layout)
	}
	return t.Format("2006-01-02 15:04:05")
}

// jsonString is s as a JSON string.
func jsonString(s string) json.RawMessage {
	raw, _ := json.Marshal(s)
	return raw
}
