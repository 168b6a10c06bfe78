package store_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
)

type stage string

func TestBind(t *testing.T) {
	ts := time.Date(2026, 1, 1, 0, 0, 0, 123_000_000, time.UTC)
	tests := []struct {
		name  string
		query string
		args  []any
		want  string
	}{
		{"no placeholders", "SELECT 1", nil, "SELECT 1"},
		{"string", "x = ?", []any{"abc"}, "x = 'abc'"},
		{"quote", "x = ?", []any{"it's"}, `x = 'it\'s'`},
		{"injection", "x = ?", []any{"' OR 1=1 --"}, `x = '\' OR 1=1 --'`},
		{"backslash", "x = ?", []any{`a\b`}, `x = 'a\\b'`},
		{"backslash before quote", "x = ?", []any{`\'`}, `x = '\\\''`},
		{"control characters", "x = ?", []any{"a\nb\rc\td\x00e\x01f\x7f"}, `x = 'a\nb\rc\td\0e\x01f\x7f'`},
		{"unicode is kept", "x = ?", []any{"日本 🚀"}, "x = '日本 🚀'"},
		{"invalid UTF-8 is kept", "x = ?", []any{"\xff\xfe"}, "x = '\xff\xfe'"},
		{"bytes", "x = ?", []any{[]byte("b'")}, `x = 'b\''`},
		{"named string", "x = ?", []any{stage("build")}, "x = 'build'"},
		{"int", "x = ?", []any{-42}, "x = -42"},
		{"int8", "x = ?", []any{int8(math.MinInt8)}, "x = -128"},
		{"int64 min", "x = ?", []any{int64(math.MinInt64)}, "x = -9223372036854775808"},
		{"uint64 max", "x = ?", []any{uint64(math.MaxUint64)}, "x = 18446744073709551615"},
		{"uint32", "x = ?", []any{uint32(7)}, "x = 7"},
		{"float", "x = ?", []any{0.1}, "x = 0.1"},
		{"integral float stays Float64", "x = ?", []any{3.0}, "x = 3.0"},
		{"negative zero", "x = ?", []any{math.Copysign(0, -1)}, "x = -0.0"},
		{"float exponent", "x = ?", []any{1e300}, "x = 1e+300"},
		{"smallest float", "x = ?", []any{math.SmallestNonzeroFloat64}, "x = 5e-324"},
		{"float32 shortest", "x = ?", []any{float32(0.1)}, "x = 0.1"},
		{"bool true", "x = ?", []any{true}, "x = 1"},
		{"bool false", "x = ?", []any{false}, "x = 0"},
		{"time as unix ms", "x = ?", []any{ts}, "x = 1767225600123"},
		{"epoch", "x = ?", []any{time.Unix(0, 0)}, "x = 0"},
		{"nil", "x = ?", []any{nil}, "x = NULL"},
		{"string slice", "x IN ?", []any{[]string{"a", "b'"}}, `x IN ['a', 'b\'']`},
		{"int slice", "has(?, x)", []any{[]uint32{1, 2}}, "has([1, 2], x)"},
		{"empty slice", "has(?, x)", []any{[]int{}}, "has([], x)"},
		{"array", "has(?, x)", []any{[2]int{1, 2}}, "has([1, 2], x)"},
		{"slice of any", "has(?, x)", []any{[]any{"a", nil, 2.5}}, "has(['a', NULL, 2.5], x)"},
		{"several", "a = ? AND b = ? AND c = ?", []any{1, "two", 3.5}, "a = 1 AND b = 'two' AND c = 3.5"},
		{"? in a string literal", "x = '?' AND y = ?", []any{1}, "x = '?' AND y = 1"},
		{"? after an escaped quote", `x = 'it\'s ?' AND y = ?`, []any{1}, `x = 'it\'s ?' AND y = 1`},
		{"? after a doubled quote", "x = 'it''s ?' AND y = ?", []any{1}, "x = 'it''s ?' AND y = 1"},
		{"? in an identifier", "SELECT `a?`, \"b?\" FROM t WHERE y = ?", []any{1}, "SELECT `a?`, \"b?\" FROM t WHERE y = 1"},
		{"? in a line comment", "SELECT 1 -- why?\nWHERE y = ?", []any{1}, "SELECT 1 -- why?\nWHERE y = 1"},
		{"? in a block comment", "SELECT /* ? */ ?", []any{1}, "SELECT /* ? */ 1"},
		{"placeholder at the end", "?", []any{"x"}, "'x'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := store.Bind(tt.query, tt.args...)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestBindErrors(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		args    []any
		wantMsg string
	}{
		{"too few args", "a = ? AND b = ?", []any{1}, "more placeholders"},
		{"too many args", "a = ?", []any{1, 2}, "1 placeholders, got 2"},
		{"args without placeholders", "SELECT 1", []any{1}, "0 placeholders"},
		{"placeholder only in a literal", "SELECT '?'", []any{1}, "0 placeholders"},
		{"placeholder only in an unclosed comment", "SELECT 1 /* ?", []any{1}, "0 placeholders"},
		{"NaN", "x = ?", []any{math.NaN()}, "no SQL literal"},
		{"+Inf", "x = ?", []any{math.Inf(1)}, "no SQL literal"},
		{"float32 -Inf", "x = ?", []any{float32(math.Inf(-1))}, "no SQL literal"},
		{"NaN in a slice", "has(?, x)", []any{[]float64{1, math.NaN()}}, "element 1"},
		{"time before 1970", "x = ?", []any{time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)}, "before 1970"},
		{"struct", "x = ?", []any{struct{}{}}, "unsupported type"},
		{"map", "x = ?", []any{map[string]int{}}, "unsupported type"},
		{"pointer", "x = ?", []any{new(int)}, "unsupported type"},
		{"nested slice", "x = ?", []any{[][]int{{1}}}, "nested arrays"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := store.Bind(tt.query, tt.args...)
			require.ErrorIs(t, err, store.ErrBind)
			require.ErrorContains(t, err, tt.wantMsg)
			require.Empty(t, got)
		})
	}
}
