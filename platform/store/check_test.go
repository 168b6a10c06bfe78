package store_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
)

func TestCheckIdent(t *testing.T) {
	tests := []struct {
		name      string
		qualified bool
		ok        bool
	}{
		{"gpu_samples", false, true},
		{"_x1", false, true},
		{"A", false, true},
		{strings.Repeat("a", 128), false, true},
		{strings.Repeat("a", 129), false, false},
		{"", false, false},
		{"1abc", false, false},
		{"a-b", false, false},
		{"a b", false, false},
		{"a;DROP", false, false},
		{"`a`", false, false},
		{"a'", false, false},
		{"ü", false, false},
		{"db.table", false, false},
		{"db.table", true, true},
		{"db.1table", true, false},
		{"a.b.c", true, false},
		{".table", true, false},
		{"db.", true, false},
		{".", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := store.CheckIdent(tt.name, tt.qualified)
			if tt.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

func TestCheckAppend(t *testing.T) {
	cols := []string{"a", "b"}
	tests := []struct {
		name    string
		table   string
		columns []string
		rows    [][]any
		wantMsg string // "" means no error
	}{
		{"ok", "t", cols, [][]any{{1, "x"}, {2, "y"}}, ""},
		{"qualified table", "db.t", cols, [][]any{{1, "x"}}, ""},
		{"no rows", "t", cols, nil, ""},
		{"finite floats", "t", cols, [][]any{{math.MaxFloat64, float32(-1.5)}}, ""},
		{"bad table", "t;", cols, nil, "table"},
		{"no columns", "t", nil, nil, "no columns"},
		{"bad column", "t", []string{"a", "b c"}, nil, "column"},
		{"duplicate column", "t", []string{"a", "a"}, nil, "named twice"},
		{"short row", "t", cols, [][]any{{1, "x"}, {1}}, "row 1 has 1 values for 2 columns"},
		{"long row", "t", cols, [][]any{{1, "x", 3}}, "row 0 has 3 values"},
		{"NaN", "t", cols, [][]any{{math.NaN(), "x"}}, "only finite floats"},
		{"-Inf float32", "t", cols, [][]any{{1, float32(math.Inf(-1))}}, "column b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := store.CheckAppend(tt.table, tt.columns, tt.rows)
			if tt.wantMsg == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, store.ErrBadRows)
			require.ErrorContains(t, err, tt.wantMsg)
		})
	}
}
