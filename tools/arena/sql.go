package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lowbarena/lowbarena/platform/ctl"
)

// cmdSQL runs one read-only statement on the running arena's store,
// through its query service (ctl.SubjectSQL), and prints the answer.
func cmdSQL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sql", stderr)
	natsURL := natsFlag(fs)
	asJSON := fs.Bool("json", false, "print the answer as JSON: kind, columns (name, type), rows (arrays of values), truncated, elapsed_ms, engine")
	asCSV := fs.Bool("csv", false, "print CSV (RFC 4180) with a header row")
	asTSV := fs.Bool("tsv", false, "print tab-separated values with a header row (ClickHouse's TabSeparatedWithNames escaping)")
	maxRows := fs.Int("max-rows", 1000, "most rows to return (up to 10000)")
	timeout := fs.Duration("timeout", 10*time.Second, "the query's time limit, in whole seconds (up to 60s)")
	// A statement may start with "-" (a "-- comment" line): only what
	// names one of the flags above is taken for a flag.
	flags, pos := splitStatement(fs, args)
	if _, err := parseFlags(fs, flags); err != nil {
		return err
	}
	formats := 0
	for _, f := range []bool{*asJSON, *asCSV, *asTSV} {
		if f {
			formats++
		}
	}
	if formats > 1 {
		return usageErr("sql takes one of --json, --csv and --tsv")
	}
	if len(pos) != 1 {
		return usageErr("sql takes one statement, quoted: arena sql \"SELECT ...\" (or - to read it from standard input)")
	}
	stmt := pos[0]
	if stmt == "-" {
		raw, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
		if err != nil {
			return fmt.Errorf("sql: read the statement: %w", err)
		}
		stmt = string(raw)
	}
	if *timeout < time.Second || *timeout%time.Second != 0 {
		return usageErr("--timeout %s: give whole seconds, for example 10s", *timeout)
	}
	c, err := dial(ctx, *natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	rctx, cancel := context.WithTimeout(ctx, *timeout+15*time.Second)
	defer cancel()
	rep, err := ctl.CallWaiting[ctl.SQLReply](rctx, c.nc, ctl.SubjectSQL, ctl.SQLRequest{SQL: stmt, MaxRows: *maxRows, TimeoutSeconds: int(*timeout / time.Second)}, serviceWait)
	var ce *ctl.Error
	switch {
	case errors.Is(err, ctl.ErrNoService):
		return fmt.Errorf("%w: no query service answers (the arena's score service holds it: is `arena up` running?)", ErrArenaDown)
	case errors.As(err, &ce) && ce.Reason != "":
		return fmt.Errorf("%s: %s", ce.Reason, ce.Message)
	case err != nil:
		return fmt.Errorf("sql: %w", err)
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	case *asCSV:
		if err := ctl.WriteCSV(stdout, rep); err != nil {
			return err
		}
	case *asTSV:
		if err := ctl.WriteTSV(stdout, rep); err != nil {
			return err
		}
	default:
		if err := writeAligned(stdout, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "(%s, %.1f ms, %s)\n", plural(len(rep.Rows), "row"), rep.ElapsedMs, rep.Engine)
	}
	switch rep.Truncated {
	case "rows":
		fmt.Fprintf(stderr, "arena sql: only the first %d rows (--max-rows); the result has more\n", rep.MaxRows)
	case "bytes":
		fmt.Fprintf(stderr, "arena sql: only the first %d rows: one answer holds about 768 KiB; narrow the query or select fewer columns\n", len(rep.Rows))
	}
	return nil
}

// splitStatement separates the flags of fs (with their values) from the
// other arguments, which are statements even when they start with "-".
func splitStatement(fs *flag.FlagSet, args []string) (flags, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		// -h and --help ask for the flags, as for every verb.
		help := (name == "h" || name == "help") && !hasValue
		if a == "-" || !strings.HasPrefix(a, "-") || strings.ContainsAny(a, " \t\n") || (f == nil && !help) {
			if a == "--" && i+1 < len(args) { // the end of the flags
				rest = append(rest, args[i+1:]...)
				return flags, rest
			}
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		if help {
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && bf.IsBoolFlag()) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, rest
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// maxCell is the widest a cell is printed in the aligned table; the rest
// of a longer value is cut with an ellipsis (--json, --csv and --tsv keep
// it whole).
const maxCell = 64

// writeAligned writes the answer as a table for people: a header of
// column names, a rule, then the rows, numbers aligned right; line breaks
// and tabs inside values are shown as \n and \t.
func writeAligned(w io.Writer, rep ctl.SQLReply) error {
	n := len(rep.Columns)
	cells := make([][]string, 0, len(rep.Rows)+1)
	head := make([]string, n)
	for i, c := range rep.Columns {
		head[i] = c.Name
	}
	cells = append(cells, head)
	right := make([]bool, n)
	for i, c := range rep.Columns {
		right[i] = numericType(c.Type)
	}
	for _, r := range rep.Rows {
		row := make([]string, n)
		for i := range row {
			if i < len(r) {
				row[i] = clip(strings.NewReplacer("\n", `\n`, "\t", `\t`, "\r", `\r`).Replace(ctl.CellText(r[i], "NULL")))
			}
		}
		cells = append(cells, row)
	}
	width := make([]int, n)
	for _, row := range cells {
		for i, s := range row {
			width[i] = max(width[i], utf8.RuneCountInString(s))
		}
	}
	var b strings.Builder
	line := func(row []string) {
		for i, s := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(s))
			if i > 0 {
				b.WriteString("  ")
			}
			if right[i] {
				b.WriteString(pad + s)
			} else if i < n-1 {
				b.WriteString(s + pad)
			} else {
				b.WriteString(s)
			}
		}
		b.WriteByte('\n')
	}
	line(cells[0])
	rule := make([]string, n)
	for i := range rule {
		rule[i] = strings.Repeat("-", width[i])
	}
	line(rule)
	for _, row := range cells[1:] {
		line(row)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// clip cuts s to maxCell runes.
func clip(s string) string {
	if utf8.RuneCountInString(s) <= maxCell {
		return s
	}
	r := []rune(s)
	return string(r[:maxCell-1]) + "…"
}

// numericType reports whether a ClickHouse type holds numbers.
func numericType(t string) bool {
	for _, wrap := range []string{"Nullable(", "LowCardinality("} {
		if s, ok := strings.CutPrefix(t, wrap); ok {
			t = strings.TrimSuffix(s, ")")
		}
	}
	for _, p := range []string{"UInt", "Int", "Float", "Decimal"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}
