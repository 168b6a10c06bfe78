package sandbox

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustValue(t *testing.T, enc string) value {
	t.Helper()
	v, err := parseValue(enc)
	require.NoError(t, err, enc)
	return v
}

// TestValueEqual: the comparison of encoded values, as canon.py writes
// them.
func TestValueEqual(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want, got string
		equal           bool
	}{
		{"none", "N", "N", true},
		{"none is not false", "N", "F", false},
		{"ints", "i5;", "i5;", true},
		{"negative ints", "i-ff;", "i-ff;", true},
		{"different ints", "i5;", "i-5;", false},
		{"big ints", "i10000000000000000000000000;", "i10000000000000000000000000;", true},
		{"big ints that differ", "i10000000000000000000000000;", "i10000000000000000000000001;", false},
		{"a bool is not an int", "i1;", "T", false},
		{"an int is not a bool", "T", "i1;", false},
		{"an int and a float by value", "i2;", "f2.0;", true},
		{"a float and an int by value", "f2.0;", "i2;", true},
		{"a float and an int that differ", "f2.5;", "i2;", false},
		{"floats within the tolerance", "f0.3;", "f0.30000000000000004;", true},
		{"floats beyond the tolerance", "f1.5;", "f1.500001;", false},
		{"small floats within the absolute tolerance", "f0.0;", "f1e-10;", true},
		{"large floats within the relative tolerance", "f1e+20;", "f1.0000000001e+20;", true},
		{"nan is nothing", "fnan;", "fnan;", false},
		{"infinities", "finf;", "finf;", true},
		{"opposite infinities", "finf;", "f-inf;", false},
		{"strs", "s6162;", "s6162;", true},
		{"strs that differ", "s6162;", "s6163;", false},
		{"a str is not bytes", "s6162;", "b6162;", false},
		{"lists", "l2;i1;s61;", "l2;i1;s61;", true},
		{"a list is not a tuple", "l2;i1;i2;", "t2;i1;i2;", false},
		{"lists of different lengths", "l1;i1;", "l2;i1;i1;", false},
		{"lists with floats", "l1;f0.3;", "l1;f0.30000000000000004;", true},
		{"sets in any order", "S3;i1;i2;i3;", "S3;i3;i1;i2;", true},
		{"sets that differ", "S2;i1;i2;", "S2;i1;i3;", false},
		{"a set is not a frozenset", "S1;i1;", "Z1;i1;", false},
		{"set members compare exactly", "S1;f0.3;", "S1;f0.30000000000000004;", false},
		{"dicts in any order", "d2;s61;i1;s62;i2;", "d2;s62;i2;s61;i1;", true},
		{"dicts whose values differ", "d1;s61;i1;", "d1;s61;i2;", false},
		{"dict keys compare exactly", "d1;i1;s61;", "d1;f1.0;s61;", false},
		{"dict values within the tolerance", "d1;s61;f0.3;", "d1;s61;f0.30000000000000004;", true},
		{"nested", "l2;t1;Nd1;s61;l0;", "l2;t1;Nd1;s61;l0;", true},
		{"nested that differ", "l2;t1;Nd1;s61;l0;", "l2;t1;Nd1;s61;t0;", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.equal, equal(mustValue(t, tc.want), mustValue(t, tc.got)))
		})
	}
}

func TestValueMalformed(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{
		"", "X", "i5", "i;", "i+5;", "ix;", "f;", "fabc;", "f1_0;", "s6;", "szz;",
		"l1;", "l2;i1;", "l-1;", "l01;i1;", "l99999999999999999999;", "d1;i1;", "N;", "NN", "i5;i6;",
		strings.Repeat("l1;", 200) + "N",
	} {
		_, err := parseValue(enc)
		require.ErrorIs(t, err, errEncoding, "%q", enc)
	}
}

func TestValueString(t *testing.T) {
	t.Parallel()
	for enc, want := range map[string]string{
		"N":                  "None",
		"T":                  "True",
		"i-ff;":              "-255",
		"f2.0;":              "2.0",
		"f0.1;":              "0.1",
		"f1e+16;":            "1e+16",
		"f1e-05;":            "1e-05",
		"f123456789.0;":      "123456789.0",
		"finf;":              "inf",
		"s6127;":             `'a\''`,
		"b00ff;":             `b'\x00\xff'`,
		"t1;i1;":             "(1,)",
		"t2;i1;i2;":          "(1, 2)",
		"l0;":                "[]",
		"S0;":                "set()",
		"S2;i2;i1;":          "{1, 2}",
		"Z1;i1;":             "frozenset({1})",
		"d2;s62;i2;s61;l1;N": "{'a': [None], 'b': 2}",
		"l1;" + "s" + strings.Repeat("61", 300) + ";": "['" + strings.Repeat("a", 118) + "…",
	} {
		require.Equal(t, want, mustValue(t, enc).String(), enc)
	}
}

// TestSplitter: the harness's records come apart from the program's
// output, however the writes cut them.
func TestSplitter(t *testing.T) {
	t.Parallel()
	mark := "lowbarena-done-0123"
	stream := "hello\n" + "\n" + mark + " r0 i5;\n" + "partial" + "\n" + mark + " x1 6162\n" + "lowbarena-done-0124 r2 i1;\n" + "\n" + mark + " end\n" + "after"
	for _, size := range []int{1, 2, 3, 7, 16, len(stream)} {
		s := newSplitter(mark, 1024)
		for p := stream; p != ""; {
			n := min(size, len(p))
			_, _ = s.Write([]byte(p[:n]))
			p = p[n:]
		}
		s.end()
		require.Equal(t, []string{"r0 i5;", "x1 6162", "end"}, s.records, "writes of %d", size)
		require.Equal(t, "hello\npartiallowbarena-done-0124 r2 i1;\nafter", s.out.String(), "writes of %d", size)
		require.False(t, s.over)
	}
	// A record without its line's end is dropped.
	s := newSplitter(mark, 1024)
	_, _ = s.Write([]byte("\n" + mark + " r0 i5;\n\n" + mark + " r1 i5"))
	s.end()
	require.Equal(t, []string{"r0 i5;"}, s.records)
	require.False(t, s.over)
	// Records past maxRecords are dropped, and said to be.
	s = newSplitter(mark, 1024)
	big := "r0 " + strings.Repeat("N", maxRecords)
	_, _ = s.Write([]byte("\n" + mark + " " + big + "\n\n" + mark + " end\n"))
	s.end()
	require.Equal(t, []string{"end"}, s.records)
	require.True(t, s.over)
}

func TestReadResults(t *testing.T) {
	t.Parallel()
	results, end, problem := readResults([]string{"r0 i5;", "x1 6162", "end"}, 2)
	require.Empty(t, problem)
	require.True(t, end)
	require.Len(t, results, 2)
	require.Equal(t, "ab", results[1].refused)
	for _, records := range [][]string{
		{"end"},                        // no result
		{"r0 i5;", "r0 i5;", "end"},    // twice
		{"r1 i5;"},                     // out of order
		{"r0 i5;", "r1 i5;", "r2 i5;"}, // more than the checks
		{"r0 i5;", "r1 i5;", "end", "end"},
		{"r0 nope"},
		{"x0 zz"},
		{"q0 i5;"},
		{"r00 i5;"},
	} {
		_, end, problem := readResults(records, 2)
		require.False(t, end, "%q", records)
		require.NotEmpty(t, problem, "%q", records)
	}
}
