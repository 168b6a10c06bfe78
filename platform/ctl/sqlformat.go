package ctl

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"strings"
)

// CellText is an SQLReply value as text: a string without its quotes, a
// number as written, NULL as null, an array or object as compact JSON.
func CellText(raw json.RawMessage, null string) string {
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case 'n':
		return null
	case '[', '{':
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil {
			return b.String()
		}
	}
	return string(raw)
}

// WriteCSV writes rep's header row and every row as CSV (RFC 4180), NULL
// as an empty field: what `arena sql --csv` prints and the gateway's
// POST /v1/sql?format=csv answers.
func WriteCSV(w io.Writer, rep SQLReply) error {
	cw := csv.NewWriter(w)
	head := make([]string, len(rep.Columns))
	for i, c := range rep.Columns {
		head[i] = c.Name
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		rec := make([]string, len(r))
		for i, v := range r {
			rec[i] = CellText(v, "")
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// tsvEscaper escapes a TabSeparated value as ClickHouse does.
var tsvEscaper = strings.NewReplacer("\\", "\\\\", "\t", "\\t", "\n", "\\n", "\r", "\\r", "\x00", "\\0")

// WriteTSV writes rep's header row and every row as ClickHouse's
// TabSeparatedWithNames: NULL is \N, tabs, line breaks and backslashes
// are escaped. It is what `arena sql --tsv` prints and the gateway's
// POST /v1/sql?format=tsv answers.
func WriteTSV(w io.Writer, rep SQLReply) error {
	var b strings.Builder
	for i, c := range rep.Columns {
		if i > 0 {
			b.WriteByte('\t')
		}
		b.WriteString(tsvEscaper.Replace(c.Name))
	}
	b.WriteByte('\n')
	for _, r := range rep.Rows {
		for i, v := range r {
			if i > 0 {
				b.WriteByte('\t')
			}
			if string(v) == "null" {
				b.WriteString(`\N`)
				continue
			}
			b.WriteString(tsvEscaper.Replace(CellText(v, "")))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
