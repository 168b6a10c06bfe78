package store

import (
	"context"
	"fmt"
	"reflect"
	"sync"
)

// Row is a typed row of one of the arena's tables. Its exported fields carry
// `ch:"column"` tags; their order is the column order used by Insert.
type Row interface {
	// TableName names the table the row belongs to.
	TableName() string
}

// GPUSample is one reading of one GPU during a runner job (table
// gpu_samples). Memory is in bytes, power in watts, util in [0, 1].
type GPUSample struct {
	TsMs      uint64  `ch:"ts_ms" json:"ts_ms"`
	Pod       string  `ch:"pod" json:"pod"`
	GPU       uint32  `ch:"gpu" json:"gpu"`
	GPUUUID   string  `ch:"gpu_uuid" json:"gpu_uuid"`
	RunID     string  `ch:"run_id" json:"run_id"`
	JobID     string  `ch:"job_id" json:"job_id"`
	Seq       uint64  `ch:"seq" json:"seq"`
	MemUsed   uint64  `ch:"mem_used" json:"mem_used"`
	MemTotal  uint64  `ch:"mem_total" json:"mem_total"`
	ProcMem   uint64  `ch:"proc_mem" json:"proc_mem"`
	Util      float64 `ch:"util" json:"util"`
	Power     float64 `ch:"power" json:"power"`
	Simulated uint8   `ch:"simulated" json:"simulated"`
}

// TableName implements Row.
func (GPUSample) TableName() string { return "gpu_samples" }

// Request is one request of a load-generator workload (table requests).
// Times are in milliseconds.
type Request struct {
	TsMs         uint64  `ch:"ts_ms" json:"ts_ms"`
	SubmissionID string  `ch:"submission_id" json:"submission_id"`
	JobID        string  `ch:"job_id" json:"job_id"`
	RunID        string  `ch:"run_id" json:"run_id"`
	Workload     string  `ch:"workload" json:"workload"`
	Seq          uint32  `ch:"seq" json:"seq"`
	PromptTokens uint32  `ch:"prompt_tokens" json:"prompt_tokens"`
	OutputTokens uint32  `ch:"output_tokens" json:"output_tokens"`
	TTFTMs       float64 `ch:"ttft_ms" json:"ttft_ms"`
	ITLP50Ms     float64 `ch:"itl_p50_ms" json:"itl_p50_ms"`
	ITLP99Ms     float64 `ch:"itl_p99_ms" json:"itl_p99_ms"`
	E2EMs        float64 `ch:"e2e_ms" json:"e2e_ms"`
	OK           uint8   `ch:"ok" json:"ok"`
	Error        string  `ch:"error" json:"error"`
	Simulated    uint8   `ch:"simulated" json:"simulated"`
}

// TableName implements Row.
func (Request) TableName() string { return "requests" }

// QualityItem is one graded sample of one eval item, for the BF16 reference
// (role "bf16") or a candidate (role "candidate") (table quality_items).
type QualityItem struct {
	TsMs         uint64  `ch:"ts_ms" json:"ts_ms"`
	Campaign     string  `ch:"campaign" json:"campaign"`
	Suite        string  `ch:"suite" json:"suite"`
	SuiteVersion string  `ch:"suite_version" json:"suite_version"`
	SubmissionID string  `ch:"submission_id" json:"submission_id"`
	Role         string  `ch:"role" json:"role"`
	Domain       string  `ch:"domain" json:"domain"`
	ItemID       string  `ch:"item_id" json:"item_id"`
	Sample       uint32  `ch:"sample" json:"sample"`
	Score        float64 `ch:"score" json:"score"`
	Formatted    uint8   `ch:"formatted" json:"formatted"`
	OutputTokens uint32  `ch:"output_tokens" json:"output_tokens"`
	Simulated    uint8   `ch:"simulated" json:"simulated"`
}

// TableName implements Row.
func (QualityItem) TableName() string { return "quality_items" }

// QualityAnswer is the text of one graded sample (table quality_answers),
// which the engine audits compare with its answers under load.
type QualityAnswer struct {
	TsMs         uint64  `ch:"ts_ms" json:"ts_ms"`
	Campaign     string  `ch:"campaign" json:"campaign"`
	SuiteVersion string  `ch:"suite_version" json:"suite_version"`
	SubmissionID string  `ch:"submission_id" json:"submission_id"`
	Role         string  `ch:"role" json:"role"`
	ItemID       string  `ch:"item_id" json:"item_id"`
	Sample       uint32  `ch:"sample" json:"sample"`
	Score        float64 `ch:"score" json:"score"`
	OutputTokens uint32  `ch:"output_tokens" json:"output_tokens"`
	Answer       string  `ch:"answer" json:"answer"`
}

// TableName implements Row.
func (QualityAnswer) TableName() string { return "quality_answers" }

// StageResult is the outcome of one pipeline stage for one submission (table
// stage_results). Payload is the JSON of the event that ended the stage.
type StageResult struct {
	TsMs         uint64 `ch:"ts_ms" json:"ts_ms"`
	SubmissionID string `ch:"submission_id" json:"submission_id"`
	Stage        string `ch:"stage" json:"stage"`
	Status       string `ch:"status" json:"status"`
	Reason       string `ch:"reason" json:"reason"`
	Message      string `ch:"message" json:"message"`
	EventID      string `ch:"event_id" json:"event_id"`
	StartedMs    uint64 `ch:"started_ms" json:"started_ms"`
	FinishedMs   uint64 `ch:"finished_ms" json:"finished_ms"`
	Payload      string `ch:"payload" json:"payload"`
}

// TableName implements Row.
func (StageResult) TableName() string { return "stage_results" }

// Score is one scored submission under one scoring policy version (table
// scores). Payload is the JSON of the dev_score block.
type Score struct {
	TsMs           uint64  `ch:"ts_ms" json:"ts_ms"`
	SubmissionID   string  `ch:"submission_id" json:"submission_id"`
	Policy         string  `ch:"policy" json:"policy"`
	Campaign       string  `ch:"campaign" json:"campaign"`
	TaskID         string  `ch:"task_id" json:"task_id"`
	Participant    string  `ch:"participant" json:"participant"`
	Method         string  `ch:"method" json:"method"`
	Split          string  `ch:"split" json:"split"`
	Score          float64 `ch:"score" json:"score"`
	EfficiencyGain float64 `ch:"efficiency_gain" json:"efficiency_gain"`
	Drift          float64 `ch:"drift" json:"drift"`
	Qualified      uint8   `ch:"qualified" json:"qualified"`
	Ranked         uint8   `ch:"ranked" json:"ranked"`
	Reason         string  `ch:"reason" json:"reason"`
	Payload        string  `ch:"payload" json:"payload"`
}

// TableName implements Row.
func (Score) TableName() string { return "scores" }

// RoundStep is one step of a round, with its real start and end (table
// round_steps).
type RoundStep struct {
	TsMs       uint64 `ch:"ts_ms" json:"ts_ms"`
	RoundID    string `ch:"round_id" json:"round_id"`
	Step       uint32 `ch:"step" json:"step"`
	Name       string `ch:"name" json:"name"`
	Phase      string `ch:"phase" json:"phase"`
	Role       string `ch:"role" json:"role"`
	EntryID    string `ch:"entry_id" json:"entry_id"`
	Status     string `ch:"status" json:"status"`
	StartedMs  uint64 `ch:"started_ms" json:"started_ms"`
	FinishedMs uint64 `ch:"finished_ms" json:"finished_ms"`
	Detail     string `ch:"detail" json:"detail"`
}

// TableName implements Row.
func (RoundStep) TableName() string { return "round_steps" }

// GPUSeconds is the GPU time of one delivery of a runner job, by phase
// (table gpu_seconds): held, serving and the engines' starts split into
// loading, graph capture and the rest, in seconds. Attempt is the
// delivery (a job handed back and run again held its GPU each time);
// Status "completed" or "failed".
type GPUSeconds struct {
	TsMs          uint64  `ch:"ts_ms" json:"ts_ms"`
	SubmissionID  string  `ch:"submission_id" json:"submission_id"`
	RoundID       string  `ch:"round_id" json:"round_id"`
	JobID         string  `ch:"job_id" json:"job_id"`
	Attempt       uint32  `ch:"attempt" json:"attempt"`
	Kind          string  `ch:"kind" json:"kind"`
	Pod           string  `ch:"pod" json:"pod"`
	Status        string  `ch:"status" json:"status"`
	HeldS         float64 `ch:"held_s" json:"held_s"`
	ServingS      float64 `ch:"serving_s" json:"serving_s"`
	EngineStartS  float64 `ch:"engine_start_s" json:"engine_start_s"`
	LoadingS      float64 `ch:"loading_s" json:"loading_s"`
	GraphCaptureS float64 `ch:"graph_capture_s" json:"graph_capture_s"`
	OtherStartS   float64 `ch:"other_start_s" json:"other_start_s"`
	Starts        uint32  `ch:"starts" json:"starts"`
	CachedStarts  uint32  `ch:"cached_starts" json:"cached_starts"`
	Simulated     uint8   `ch:"simulated" json:"simulated"`
}

// TableName implements Row.
func (GPUSeconds) TableName() string { return "gpu_seconds" }

// Insert appends typed rows to their table in one batch. To a store that
// takes columns (ColumnAppender) the rows go as typed columns, read
// without reflection (see ColumnsOf): a slice per column, no value boxed.
func Insert[R Row](ctx context.Context, s Store, rows []R) error {
	if len(rows) == 0 {
		return nil
	}
	var zero R
	if ca, ok := s.(ColumnAppender); ok {
		if c, ok := ColumnsOf(rows); ok {
			err := ca.AppendColumns(ctx, c)
			c.release()
			if err != nil {
				return fmt.Errorf("store: insert %d rows into %s: %w", len(rows), zero.TableName(), err)
			}
			return nil
		}
	}
	cols, idx := columnsOf(reflect.TypeOf(zero))
	values := make([][]any, len(rows))
	for i := range rows {
		v := reflect.ValueOf(rows[i])
		vals := make([]any, len(idx))
		for j, fi := range idx {
			vals[j] = v.Field(fi).Interface()
		}
		values[i] = vals
	}
	if err := s.Append(ctx, zero.TableName(), cols, values); err != nil {
		return fmt.Errorf("store: insert %d rows into %s: %w", len(rows), zero.TableName(), err)
	}
	return nil
}

var columnCache sync.Map // reflect.Type -> columnInfo

type columnInfo struct {
	names []string
	index []int
}

// columnsOf returns the ch-tagged columns of a struct type and the indexes of
// their fields, in declaration order.
func columnsOf(t reflect.Type) ([]string, []int) {
	if c, ok := columnCache.Load(t); ok {
		ci := c.(columnInfo)
		return ci.names, ci.index
	}
	var ci columnInfo
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("ch")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		ci.names = append(ci.names, tag)
		ci.index = append(ci.index, i)
	}
	columnCache.Store(t, ci)
	return ci.names, ci.index
}

// FieldsByColumn maps the ch tags of a struct type to field indexes. Adapters
// use it to decode rows into Select's destination.
func FieldsByColumn(t reflect.Type) map[string]int {
	names, idx := columnsOf(t)
	m := make(map[string]int, len(names))
	for i, n := range names {
		m[n] = idx[i]
	}
	return m
}
