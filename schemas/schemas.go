// Package schemas holds the arena's data contracts as files: the JSON
// Schemas of every event payload and of the submission record, and the
// ClickHouse DDL migrations. Go code reads them through this package, so the
// files are the single source of truth.
package schemas

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed clickhouse/*.sql
var clickhouseFS embed.FS

// Migration is one numbered ClickHouse DDL file.
type Migration struct {
	// Version is the number the file name starts with (0001_init.sql is 1).
	Version int
	// Name is the file name.
	Name string
	// Statements are the file's statements, split on semicolons that end a
	// line, with comment lines removed.
	Statements []string
}

// Migrations returns the ClickHouse migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(clickhouseFS, "clickhouse")
	if err != nil {
		return nil, fmt.Errorf("schemas: read migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("schemas: migration %q: want NNNN_name.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("schemas: migration %q: bad version %q", name, num)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("schemas: migrations %q and %q share version %d", prev, name, v)
		}
		seen[v] = name
		raw, err := clickhouseFS.ReadFile(path.Join("clickhouse", name))
		if err != nil {
			return nil, fmt.Errorf("schemas: read %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, Statements: splitStatements(string(raw))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// splitStatements drops "--" comment lines and splits on ";" at line ends.
func splitStatements(sql string) []string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	var out []string
	for _, stmt := range strings.Split(b.String(), ";\n") {
		if s := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(stmt), ";")); s != "" {
			out = append(out, s)
		}
	}
	return out
}
