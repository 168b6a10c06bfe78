package store_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/services/store"
)

// filled returns two rows of type R whose every ch-tagged field holds a
// value of its own (distinct across fields and rows), set by reflection.
func filled[R store.Row](t *testing.T) []R {
	rows := make([]R, 2)
	for i := range rows {
		v := reflect.ValueOf(&rows[i]).Elem()
		for j := 0; j < v.NumField(); j++ {
			f := v.Field(j)
			n := uint64(100*i + j + 1)
			switch f.Kind() {
			case reflect.Uint64, reflect.Uint32, reflect.Uint8:
				f.SetUint(n)
			case reflect.Float64:
				f.SetFloat(float64(n) + 0.5)
			case reflect.String:
				f.SetString(v.Type().Field(j).Name + "-" + string(rune('a'+i)))
			default:
				t.Fatalf("%s.%s: a %s field; the column tables know uint64, uint32, uint8, float64 and string", v.Type(), v.Type().Field(j).Name, f.Kind())
			}
		}
	}
	return rows
}

// checkColumns requires that ColumnsOf reads rows into the columns of the
// type's ch tags, in their order, each value its field's.
func checkColumns[R store.Row](t *testing.T) {
	rows := filled[R](t)
	c, ok := store.ColumnsOf(rows)
	require.True(t, ok, "every row type of the arena has a column table")
	typ := reflect.TypeFor[R]()
	require.Equal(t, rows[0].TableName(), c.Table)
	require.Equal(t, len(rows), c.Len)
	var tags []string
	for j := 0; j < typ.NumField(); j++ {
		tag := typ.Field(j).Tag.Get("ch")
		if tag == "" || tag == "-" {
			continue
		}
		tags = append(tags, tag)
		col := len(tags) - 1
		for i := range rows {
			want := reflect.ValueOf(rows[i]).Field(j).Interface()
			require.Equal(t, want, c.Value(col, i), "%s row %d column %s", typ.Name(), i, tag)
		}
	}
	require.Equal(t, tags, c.Names, "%s: the columns are its ch tags, in order", typ.Name())
	require.Len(t, c.Data, len(tags))
	require.NoError(t, store.CheckColumns(c))
	require.Len(t, c.Rows(), len(rows))
	require.Equal(t, c.Value(len(tags)-1, 1), c.Rows()[1][len(tags)-1])
}

// TestRowColumnsMatchTheirTags: the column table of every row type reads
// each of its fields into the column its ch tag names, so Insert writes by
// columns what it would write by reflection.
func TestRowColumnsMatchTheirTags(t *testing.T) {
	t.Run("GPUSample", checkColumns[store.GPUSample])
	t.Run("Request", checkColumns[store.Request])
	t.Run("QualityItem", checkColumns[store.QualityItem])
	t.Run("QualityAnswer", checkColumns[store.QualityAnswer])
	t.Run("StageResult", checkColumns[store.StageResult])
	t.Run("Score", checkColumns[store.Score])
	t.Run("RoundStep", checkColumns[store.RoundStep])
}

// otherRow is a row type outside the package: it has no column table.
type otherRow struct {
	A uint64 `ch:"a"`
}

func (otherRow) TableName() string { return "other" }

func TestColumnsOfAForeignRow(t *testing.T) {
	_, ok := store.ColumnsOf([]otherRow{{A: 1}})
	require.False(t, ok, "a row type without a column table takes the row path")
}
