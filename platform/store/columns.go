package store

import (
	"context"
	"fmt"
	"math"
	"sync"
)

// Columns is a batch of rows of one table held column by column, each
// column a slice of its Go type ([]uint64, []uint32, []uint8, []float64 or
// []string): what Insert hands an adapter that takes columns, with no
// value boxed on the way. Every column has Len values.
type Columns struct {
	Table string
	Names []string
	// Data holds the columns in the order of Names.
	Data []any
	Len  int
}

// ColumnAppender is implemented by the stores that take a batch as typed
// columns (both adapters do): Insert uses it, so a row costs no more than
// its values.
type ColumnAppender interface {
	// AppendColumns writes c in one batch, as Append would write its
	// rows: the same checks, the same conversions, the same errors. It
	// keeps nothing of c once it returns: Insert reuses c's slices for
	// its next batch.
	AppendColumns(ctx context.Context, c *Columns) error
}

// CheckColumns checks a batch of columns as CheckAppend checks rows: the
// table and column names, every column of Len values of a type a column
// takes, and no float NaN or ±Inf.
func CheckColumns(c *Columns) error {
	if err := CheckAppend(c.Table, c.Names, nil); err != nil {
		return err
	}
	if len(c.Data) != len(c.Names) {
		return fmt.Errorf("%w: %s: %d columns of data for %d named", ErrBadRows, c.Table, len(c.Data), len(c.Names))
	}
	for j, d := range c.Data {
		var n int
		switch x := d.(type) {
		case []uint64:
			n = len(x)
		case []uint32:
			n = len(x)
		case []uint8:
			n = len(x)
		case []string:
			n = len(x)
		case []float64:
			n = len(x)
			for i, f := range x {
				if math.IsNaN(f) || math.IsInf(f, 0) {
					return fmt.Errorf("%w: %s: row %d column %s is %v; only finite floats are stored", ErrBadRows, c.Table, i, c.Names[j], f)
				}
			}
		default:
			return fmt.Errorf("%w: %s: column %s is a %T, not a column of uint64, uint32, uint8, float64 or string", ErrBadRows, c.Table, c.Names[j], d)
		}
		if n != c.Len {
			return fmt.Errorf("%w: %s: column %s has %d values for %d rows", ErrBadRows, c.Table, c.Names[j], n, c.Len)
		}
	}
	return nil
}

// Value returns row i of column j, boxed: for adapters that fall back to
// rows, and for tests.
func (c *Columns) Value(j, i int) any {
	switch x := c.Data[j].(type) {
	case []uint64:
		return x[i]
	case []uint32:
		return x[i]
	case []uint8:
		return x[i]
	case []float64:
		return x[i]
	case []string:
		return x[i]
	}
	return nil
}

// Rows returns the batch as rows of boxed values, for Append.
func (c *Columns) Rows() [][]any {
	rows := make([][]any, c.Len)
	flat := make([]any, c.Len*len(c.Data))
	for i := range rows {
		rows[i] = flat[i*len(c.Data) : (i+1)*len(c.Data) : (i+1)*len(c.Data)]
		for j := range c.Data {
			rows[i][j] = c.Value(j, i)
		}
	}
	return rows
}

// field reads one column of a row type R: exactly one of its getters is
// set, the one of the column's Go type.
type field[R any] struct {
	name string
	u64  func(*R) uint64
	u32  func(*R) uint32
	u8   func(*R) uint8
	f64  func(*R) float64
	str  func(*R) string
}

func u64[R any](name string, get func(*R) uint64) field[R]  { return field[R]{name: name, u64: get} }
func u32[R any](name string, get func(*R) uint32) field[R]  { return field[R]{name: name, u32: get} }
func u8[R any](name string, get func(*R) uint8) field[R]    { return field[R]{name: name, u8: get} }
func f64[R any](name string, get func(*R) float64) field[R] { return field[R]{name: name, f64: get} }
func str[R any](name string, get func(*R) string) field[R]  { return field[R]{name: name, str: get} }

// fields are a row type's columns, in the order of its ch tags
// (TestRowColumnsMatchTheirTags holds them to the tags).
type fields[R any] []field[R]

// columnar is implemented by the row types of this package: their
// columns, as a fields[R] of their own type.
type columnar interface{ fields() any }

// names lists the columns.
func (fs fields[R]) names() []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

// columnPools hold each table's Columns between Insert's batches (table
// name -> *sync.Pool of *Columns): a batch reuses the column slices of one
// before it instead of allocating them (10k gpu_samples rows are 1.4 MB
// of columns), as a program that writes with the driver alone keeps its
// own. Insert puts a batch's Columns back once the adapter has returned
// (ColumnAppender keeps nothing of them).
var columnPools sync.Map

func columnPool(table string) *sync.Pool {
	if p, ok := columnPools.Load(table); ok {
		return p.(*sync.Pool)
	}
	p, _ := columnPools.LoadOrStore(table, &sync.Pool{})
	return p.(*sync.Pool)
}

// release returns c to its table's pool, its strings cleared so that the
// pool holds none of the batch's values alive.
func (c *Columns) release() {
	for _, d := range c.Data {
		if s, ok := d.([]string); ok {
			clear(s)
		}
	}
	columnPool(c.Table).Put(c)
}

// reuse returns d's slice resliced to n values when it is a []T with room
// for them, else a new one.
func reuse[T any](d any, n int) []T {
	if s, ok := d.([]T); ok && cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// columns reads rows into typed columns: one slice per column, filled in
// one pass per column, without reflection or boxing, in slices reused from
// an earlier batch of the table where there is one.
func (fs fields[R]) columns(table string, rows []R) *Columns {
	c, _ := columnPool(table).Get().(*Columns)
	if c == nil || len(c.Data) != len(fs) {
		c = &Columns{Table: table, Names: fs.names(), Data: make([]any, len(fs))}
	}
	c.Len = len(rows)
	for j, f := range fs {
		switch {
		case f.u64 != nil:
			col := reuse[uint64](c.Data[j], len(rows))
			for i := range rows {
				col[i] = f.u64(&rows[i])
			}
			c.Data[j] = col
		case f.u32 != nil:
			col := reuse[uint32](c.Data[j], len(rows))
			for i := range rows {
				col[i] = f.u32(&rows[i])
			}
			c.Data[j] = col
		case f.u8 != nil:
			col := reuse[uint8](c.Data[j], len(rows))
			for i := range rows {
				col[i] = f.u8(&rows[i])
			}
			c.Data[j] = col
		case f.f64 != nil:
			col := reuse[float64](c.Data[j], len(rows))
			for i := range rows {
				col[i] = f.f64(&rows[i])
			}
			c.Data[j] = col
		default:
			col := reuse[string](c.Data[j], len(rows))
			for i := range rows {
				col[i] = f.str(&rows[i])
			}
			c.Data[j] = col
		}
	}
	return c
}

// ColumnsOf returns rows as typed columns, or false for a row type that
// has no column table (a Row defined outside this package).
func ColumnsOf[R Row](rows []R) (*Columns, bool) {
	var zero R
	cr, ok := any(zero).(columnar)
	if !ok {
		return nil, false
	}
	fs, ok := cr.fields().(fields[R])
	if !ok {
		return nil, false
	}
	return fs.columns(zero.TableName(), rows), true
}

// The column tables of the arena's rows.

func (GPUSample) fields() any { return gpuSampleFields }

var gpuSampleFields = fields[GPUSample]{
	u64("ts_ms", func(r *GPUSample) uint64 { return r.TsMs }),
	str("pod", func(r *GPUSample) string { return r.Pod }),
	u32("gpu", func(r *GPUSample) uint32 { return r.GPU }),
	str("gpu_uuid", func(r *GPUSample) string { return r.GPUUUID }),
	str("run_id", func(r *GPUSample) string { return r.RunID }),
	str("job_id", func(r *GPUSample) string { return r.JobID }),
	u64("seq", func(r *GPUSample) uint64 { return r.Seq }),
	u64("mem_used", func(r *GPUSample) uint64 { return r.MemUsed }),
	u64("mem_total", func(r *GPUSample) uint64 { return r.MemTotal }),
	u64("proc_mem", func(r *GPUSample) uint64 { return r.ProcMem }),
	f64("util", func(r *GPUSample) float64 { return r.Util }),
	f64("power", func(r *GPUSample) float64 { return r.Power }),
	u8("simulated", func(r *GPUSample) uint8 { return r.Simulated }),
}

func (Request) fields() any { return requestFields }

var requestFields = fields[Request]{
	u64("ts_ms", func(r *Request) uint64 { return r.TsMs }),
	str("submission_id", func(r *Request) string { return r.SubmissionID }),
	str("job_id", func(r *Request) string { return r.JobID }),
	str("run_id", func(r *Request) string { return r.RunID }),
	str("workload", func(r *Request) string { return r.Workload }),
	u32("seq", func(r *Request) uint32 { return r.Seq }),
	u32("prompt_tokens", func(r *Request) uint32 { return r.PromptTokens }),
	u32("output_tokens", func(r *Request) uint32 { return r.OutputTokens }),
	f64("ttft_ms", func(r *Request) float64 { return r.TTFTMs }),
	f64("itl_p50_ms", func(r *Request) float64 { return r.ITLP50Ms }),
	f64("itl_p99_ms", func(r *Request) float64 { return r.ITLP99Ms }),
	f64("e2e_ms", func(r *Request) float64 { return r.E2EMs }),
	u8("ok", func(r *Request) uint8 { return r.OK }),
	str("error", func(r *Request) string { return r.Error }),
	u8("simulated", func(r *Request) uint8 { return r.Simulated }),
}

func (QualityItem) fields() any { return qualityItemFields }

var qualityItemFields = fields[QualityItem]{
	u64("ts_ms", func(r *QualityItem) uint64 { return r.TsMs }),
	str("campaign", func(r *QualityItem) string { return r.Campaign }),
	str("suite", func(r *QualityItem) string { return r.Suite }),
	str("suite_version", func(r *QualityItem) string { return r.SuiteVersion }),
	str("submission_id", func(r *QualityItem) string { return r.SubmissionID }),
	str("role", func(r *QualityItem) string { return r.Role }),
	str("domain", func(r *QualityItem) string { return r.Domain }),
	str("item_id", func(r *QualityItem) string { return r.ItemID }),
	u32("sample", func(r *QualityItem) uint32 { return r.Sample }),
	f64("score", func(r *QualityItem) float64 { return r.Score }),
	u8("formatted", func(r *QualityItem) uint8 { return r.Formatted }),
	u32("output_tokens", func(r *QualityItem) uint32 { return r.OutputTokens }),
	u8("simulated", func(r *QualityItem) uint8 { return r.Simulated }),
}

func (QualityAnswer) fields() any { return qualityAnswerFields }

var qualityAnswerFields = fields[QualityAnswer]{
	u64("ts_ms", func(r *QualityAnswer) uint64 { return r.TsMs }),
	str("campaign", func(r *QualityAnswer) string { return r.Campaign }),
	str("suite_version", func(r *QualityAnswer) string { return r.SuiteVersion }),
	str("submission_id", func(r *QualityAnswer) string { return r.SubmissionID }),
	str("role", func(r *QualityAnswer) string { return r.Role }),
	str("item_id", func(r *QualityAnswer) string { return r.ItemID }),
	u32("sample", func(r *QualityAnswer) uint32 { return r.Sample }),
	f64("score", func(r *QualityAnswer) float64 { return r.Score }),
	u32("output_tokens", func(r *QualityAnswer) uint32 { return r.OutputTokens }),
	str("answer", func(r *QualityAnswer) string { return r.Answer }),
}

func (StageResult) fields() any { return stageResultFields }

var stageResultFields = fields[StageResult]{
	u64("ts_ms", func(r *StageResult) uint64 { return r.TsMs }),
	str("submission_id", func(r *StageResult) string { return r.SubmissionID }),
	str("stage", func(r *StageResult) string { return r.Stage }),
	str("status", func(r *StageResult) string { return r.Status }),
	str("reason", func(r *StageResult) string { return r.Reason }),
	str("message", func(r *StageResult) string { return r.Message }),
	str("event_id", func(r *StageResult) string { return r.EventID }),
	u64("started_ms", func(r *StageResult) uint64 { return r.StartedMs }),
	u64("finished_ms", func(r *StageResult) uint64 { return r.FinishedMs }),
	str("payload", func(r *StageResult) string { return r.Payload }),
}

func (Score) fields() any { return scoreFields }

var scoreFields = fields[Score]{
	u64("ts_ms", func(r *Score) uint64 { return r.TsMs }),
	str("submission_id", func(r *Score) string { return r.SubmissionID }),
	str("policy", func(r *Score) string { return r.Policy }),
	str("campaign", func(r *Score) string { return r.Campaign }),
	str("task_id", func(r *Score) string { return r.TaskID }),
	str("participant", func(r *Score) string { return r.Participant }),
	str("method", func(r *Score) string { return r.Method }),
	str("split", func(r *Score) string { return r.Split }),
	f64("score", func(r *Score) float64 { return r.Score }),
	f64("efficiency_gain", func(r *Score) float64 { return r.EfficiencyGain }),
	f64("drift", func(r *Score) float64 { return r.Drift }),
	u8("qualified", func(r *Score) uint8 { return r.Qualified }),
	u8("ranked", func(r *Score) uint8 { return r.Ranked }),
	str("reason", func(r *Score) string { return r.Reason }),
	str("payload", func(r *Score) string { return r.Payload }),
}

func (RoundStep) fields() any { return roundStepFields }

var roundStepFields = fields[RoundStep]{
	u64("ts_ms", func(r *RoundStep) uint64 { return r.TsMs }),
	str("round_id", func(r *RoundStep) string { return r.RoundID }),
	u32("step", func(r *RoundStep) uint32 { return r.Step }),
	str("name", func(r *RoundStep) string { return r.Name }),
	str("phase", func(r *RoundStep) string { return r.Phase }),
	str("role", func(r *RoundStep) string { return r.Role }),
	str("entry_id", func(r *RoundStep) string { return r.EntryID }),
	str("status", func(r *RoundStep) string { return r.Status }),
	u64("started_ms", func(r *RoundStep) uint64 { return r.StartedMs }),
	u64("finished_ms", func(r *RoundStep) uint64 { return r.FinishedMs }),
	str("detail", func(r *RoundStep) string { return r.Detail }),
}

func (GPUSeconds) fields() any { return gpuSecondsFields }

var gpuSecondsFields = fields[GPUSeconds]{
	u64("ts_ms", func(r *GPUSeconds) uint64 { return r.TsMs }),
	str("submission_id", func(r *GPUSeconds) string { return r.SubmissionID }),
	str("round_id", func(r *GPUSeconds) string { return r.RoundID }),
	str("job_id", func(r *GPUSeconds) string { return r.JobID }),
	u32("attempt", func(r *GPUSeconds) uint32 { return r.Attempt }),
	str("kind", func(r *GPUSeconds) string { return r.Kind }),
	str("pod", func(r *GPUSeconds) string { return r.Pod }),
	str("status", func(r *GPUSeconds) string { return r.Status }),
	f64("held_s", func(r *GPUSeconds) float64 { return r.HeldS }),
	f64("serving_s", func(r *GPUSeconds) float64 { return r.ServingS }),
	f64("engine_start_s", func(r *GPUSeconds) float64 { return r.EngineStartS }),
	f64("loading_s", func(r *GPUSeconds) float64 { return r.LoadingS }),
	f64("graph_capture_s", func(r *GPUSeconds) float64 { return r.GraphCaptureS }),
	f64("other_start_s", func(r *GPUSeconds) float64 { return r.OtherStartS }),
	u32("starts", func(r *GPUSeconds) uint32 { return r.Starts }),
	u32("cached_starts", func(r *GPUSeconds) uint32 { return r.CachedStarts }),
	u8("simulated", func(r *GPUSeconds) uint8 { return r.Simulated }),
}
