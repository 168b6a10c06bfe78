package store_test

import (
	"context"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/platform/store"
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
	t.Run("GPUSeconds", checkColumns[store.GPUSeconds])
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

// columnsStore is a store that takes columns and notes what each batch
// handed it: the first value of a uint64 column's backing array (to see
// it reused) and the batch's values, read while the batch is its own.
type columnsStore struct {
	arrays  []*uint64
	seqs    [][]uint64
	pods    [][]string
	lastPod []string // the pod column of the last batch, kept past its return
}

func (s *columnsStore) AppendColumns(_ context.Context, c *store.Columns) error {
	seq := c.Data[slices.Index(c.Names, "seq")].([]uint64)
	pod := c.Data[slices.Index(c.Names, "pod")].([]string)
	s.arrays = append(s.arrays, &seq[:1][0])
	s.seqs, s.pods, s.lastPod = append(s.seqs, slices.Clone(seq)), append(s.pods, slices.Clone(pod)), pod
	return nil
}

func (*columnsStore) Append(context.Context, string, []string, [][]any) error { return nil }
func (*columnsStore) Select(context.Context, any, string, ...any) error       { return nil }
func (*columnsStore) Exec(context.Context, string, ...any) error              { return nil }
func (*columnsStore) Engine() string                                          { return "columns" }
func (*columnsStore) Close() error                                            { return nil }

// TestInsertReusesItsColumns: Insert hands each batch of a table the
// column slices of the one before (no 1.4 MB of columns allocated per 10k
// gpu_samples rows), each batch with its own values, a smaller batch
// resliced, and no string of a batch held once Insert has returned.
func TestInsertReusesItsColumns(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops a quarter of what is put in a sync.Pool")
	}
	// A garbage collection empties a sync.Pool (two, with its victim
	// cache): none runs while the batches go in, so that reuse is what
	// the store does, not what the collector allowed.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	ctx := context.Background()
	st := &columnsStore{}
	batch := func(n int, seq0 uint64, pod string) []store.GPUSample {
		rows := make([]store.GPUSample, n)
		for i := range rows {
			rows[i] = store.GPUSample{Seq: seq0 + uint64(i), Pod: pod}
		}
		return rows
	}
	sizes := []int{1000, 1000, 10}
	for k, n := range sizes {
		require.NoError(t, store.Insert(ctx, st, batch(n, uint64(k)*1000, fmt.Sprintf("pod-%d", k))))
		require.Equal(t, []string{"", ""}, st.lastPod[:2], "the batch's strings are cleared once Insert returns")
	}
	for k, n := range sizes {
		require.Len(t, st.seqs[k], n)
		require.Equal(t, uint64(k)*1000, st.seqs[k][0])
		require.Equal(t, uint64(k)*1000+uint64(n-1), st.seqs[k][n-1])
		require.Equal(t, fmt.Sprintf("pod-%d", k), st.pods[k][n-1])
	}
	require.Same(t, st.arrays[0], st.arrays[1], "the second batch reuses the first's column")
	require.Same(t, st.arrays[1], st.arrays[2], "a smaller batch reuses it too")
}
