-- The GPU time of every runner job, by phase: one row per job (and per
-- delivery of it: a job handed back and run again held its GPU twice).
-- held_s is the GPU held by the job, its start on the device to its end;
-- serving_s the time the measured work (the workloads' requests, the
-- suite's answers) was served; engine_start_s the engines' starts, launch
-- to health, split into loading_s and graph_capture_s where the engine's
-- log tells and other_start_s (the rest). starts counts the starts the
-- job paid for; cached_starts the reused BF16 references it did not.
-- status is "completed" or "failed". Sum per submission_id for a
-- submission's GPU-seconds (docs/operators/sql.md).
CREATE TABLE IF NOT EXISTS gpu_seconds (
    ts_ms            UInt64,
    submission_id    String,
    round_id         String,
    job_id           String,
    attempt          UInt32,
    kind             String,
    pod              String,
    status           String,
    held_s           Float64,
    serving_s        Float64,
    engine_start_s   Float64,
    loading_s        Float64,
    graph_capture_s  Float64,
    other_start_s    Float64,
    starts           UInt32,
    cached_starts    UInt32,
    simulated        UInt8
) ENGINE = ReplacingMergeTree(ts_ms)
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ms, 1000)))
ORDER BY (submission_id, job_id, attempt);
