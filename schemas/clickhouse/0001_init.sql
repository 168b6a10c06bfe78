-- lowbarena telemetry and history, migration 1.
--
-- One DDL for every back-end: the embedded chDB engine (ClickHouse 26.x) and
-- a ClickHouse server as old as 18.16. So: UInt64 unix milliseconds instead
-- of DateTime64, UInt8 instead of Bool, no Map, TTL, CODEC or query
-- parameters; retention by ALTER TABLE ... DROP PARTITION (daily partitions).
--
-- Delivery is at least once, so a redelivered batch can write its rows
-- twice. Every table is a ReplacingMergeTree whose ORDER BY is the row's
-- natural key: duplicates collapse on merge, and readers that need exact
-- counts read with FINAL or aggregate idempotently (max, uniqExact).

CREATE TABLE IF NOT EXISTS gpu_samples (
    ts_ms      UInt64,
    pod        String,
    gpu        UInt32,
    gpu_uuid   String,
    run_id     String,
    job_id     String,
    seq        UInt64,
    mem_used   UInt64,
    mem_total  UInt64,
    proc_mem   UInt64,
    util       Float64,
    power      Float64,
    simulated  UInt8
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ms, 1000)))
ORDER BY (job_id, run_id, gpu, seq);

CREATE TABLE IF NOT EXISTS requests (
    ts_ms          UInt64,
    submission_id  String,
    job_id         String,
    run_id         String,
    workload       String,
    seq            UInt32,
    prompt_tokens  UInt32,
    output_tokens  UInt32,
    ttft_ms        Float64,
    itl_p50_ms     Float64,
    itl_p99_ms     Float64,
    e2e_ms         Float64,
    ok             UInt8,
    error          String,
    simulated      UInt8
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(toDateTime(intDiv(ts_ms, 1000)))
ORDER BY (job_id, run_id, workload, seq);

CREATE TABLE IF NOT EXISTS quality_items (
    ts_ms          UInt64,
    campaign       String,
    suite          String,
    suite_version  String,
    submission_id  String,
    role           String,
    domain         String,
    item_id        String,
    sample         UInt32,
    score          Float64,
    formatted      UInt8,
    output_tokens  UInt32,
    simulated      UInt8
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ms, 1000)))
ORDER BY (campaign, suite_version, submission_id, domain, item_id, sample);

CREATE TABLE IF NOT EXISTS stage_results (
    ts_ms          UInt64,
    submission_id  String,
    stage          String,
    status         String,
    reason         String,
    message        String,
    event_id       String,
    started_ms     UInt64,
    finished_ms    UInt64,
    payload        String
) ENGINE = ReplacingMergeTree(ts_ms)
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ms, 1000)))
ORDER BY (submission_id, stage, event_id);

CREATE TABLE IF NOT EXISTS scores (
    ts_ms            UInt64,
    submission_id    String,
    policy           String,
    campaign         String,
    task_id          String,
    participant      String,
    method           String,
    split            String,
    score            Float64,
    efficiency_gain  Float64,
    drift            Float64,
    qualified        UInt8,
    ranked           UInt8,
    reason           String,
    payload          String
) ENGINE = ReplacingMergeTree(ts_ms)
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ms, 1000)))
ORDER BY (submission_id, policy);

CREATE TABLE IF NOT EXISTS round_steps (
    ts_ms        UInt64,
    round_id     String,
    step         UInt32,
    name         String,
    phase        String,
    role         String,
    entry_id     String,
    status       String,
    started_ms   UInt64,
    finished_ms  UInt64,
    detail       String
) ENGINE = ReplacingMergeTree(ts_ms)
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ms, 1000)))
ORDER BY (round_id, step);
