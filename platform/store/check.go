package store

import (
	"errors"
	"fmt"
	"math"
)

// ErrBadRows is wrapped by the errors of CheckAppend.
var ErrBadRows = errors.New("store: bad rows")

// CheckAppend checks the arguments of Store.Append before an adapter writes
// anything, so every back-end refuses the same input the same way: table
// and each column must be identifiers (see CheckIdent; table may be
// database.table), columns must be non-empty and without duplicates, every
// row must have len(columns) values, and no float may be NaN or ±Inf (the
// engines would store them, but nothing in the arena means them, and chDB's
// JSON has no literal for them).
func CheckAppend(table string, columns []string, rows [][]any) error {
	if err := CheckIdent(table, true); err != nil {
		return fmt.Errorf("%w: table: %w", ErrBadRows, err)
	}
	if len(columns) == 0 {
		return fmt.Errorf("%w: %s: no columns named", ErrBadRows, table)
	}
	seen := make(map[string]bool, len(columns))
	for _, c := range columns {
		if err := CheckIdent(c, false); err != nil {
			return fmt.Errorf("%w: %s: column: %w", ErrBadRows, table, err)
		}
		if seen[c] {
			return fmt.Errorf("%w: %s: column %s named twice", ErrBadRows, table, c)
		}
		seen[c] = true
	}
	for i, row := range rows {
		if len(row) != len(columns) {
			return fmt.Errorf("%w: %s: row %d has %d values for %d columns", ErrBadRows, table, i, len(row), len(columns))
		}
		for j, v := range row {
			var f float64
			switch x := v.(type) {
			case float64:
				f = x
			case float32:
				f = float64(x)
			default:
				continue
			}
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("%w: %s: row %d column %s is %v; only finite floats are stored", ErrBadRows, table, i, columns[j], f)
			}
		}
	}
	return nil
}

// CheckIdent reports whether name is a plain SQL identifier, one that needs
// no quoting: a letter or '_' followed by letters, digits or '_', at most
// 128 bytes. With qualified, one '.' between two such identifiers is allowed
// (database.table). Adapters check every name they put into SQL text with
// it, so no name can carry SQL.
func CheckIdent(name string, qualified bool) error {
	if len(name) == 0 || len(name) > 128 {
		return fmt.Errorf("identifier %q: want 1 to 128 bytes", name)
	}
	part := 0 // length of the current dot-separated part
	dots := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		case c >= '0' && c <= '9':
			if part == 0 {
				return fmt.Errorf("identifier %q: starts with a digit", name)
			}
		case c == '.' && qualified && dots == 0 && part > 0:
			dots++
			part = 0
			continue
		default:
			return fmt.Errorf("identifier %q: want letters, digits and '_' only", name)
		}
		part++
	}
	if part == 0 {
		return fmt.Errorf("identifier %q: ends with '.'", name)
	}
	return nil
}
