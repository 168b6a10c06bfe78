package ctl_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/ctl"
)

// awkward is an answer with the awkward values: quotes, commas, tabs and
// line breaks in strings, NULL, a 64-bit integer, NaN, an array.
func awkward() ctl.SQLReply {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	return ctl.SQLReply{Kind: "select",
		Columns: []ctl.SQLColumn{{Name: "id", Type: "String"}, {Name: "n", Type: "UInt64"}, {Name: "score", Type: "Nullable(Float64)"}, {Name: "tags", Type: "Array(String)"}},
		Rows: [][]json.RawMessage{
			{raw(`"a,\"b\""`), raw(`18446744073709551615`), raw(`0.1661`), raw(`["x", "y"]`)},
			{raw(`"tab\there\nline"`), raw(`7`), raw(`null`), raw(`[]`)},
			{raw(`"é"`), raw(`0`), raw(`"nan"`), raw(`["z"]`)},
		}, MaxRows: 1000, TimeoutSeconds: 10, ElapsedMs: 1.5, Engine: "chdb 26.7.2.1"}
}

// TestSQLFormats: CSV that a CSV reader reads back whole, and TSV escaped
// as ClickHouse's TabSeparatedWithNames writes it.
func TestSQLFormats(t *testing.T) {
	t.Run("csv", func(t *testing.T) {
		var b bytes.Buffer
		require.NoError(t, ctl.WriteCSV(&b, awkward()))
		recs, err := csv.NewReader(&b).ReadAll()
		require.NoError(t, err, "a CSV reader reads it back")
		require.Equal(t, [][]string{
			{"id", "n", "score", "tags"},
			{`a,"b"`, "18446744073709551615", "0.1661", `["x","y"]`},
			{"tab\there\nline", "7", "", "[]"},
			{"é", "0", "nan", `["z"]`},
		}, recs)
	})
	t.Run("tsv", func(t *testing.T) {
		var b bytes.Buffer
		require.NoError(t, ctl.WriteTSV(&b, awkward()))
		require.Equal(t, "id\tn\tscore\ttags\n"+
			"a,\"b\"\t18446744073709551615\t0.1661\t[\"x\",\"y\"]\n"+
			"tab\\there\\nline\t7\t\\N\t[]\n"+
			"é\t0\tnan\t[\"z\"]\n", b.String())
	})
}
