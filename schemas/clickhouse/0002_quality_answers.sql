-- The text of every graded answer of a quality job, beside its score:
-- the accuracy-under-load and served-model audits compare the engine's
-- answers within the efficiency workloads with these, token for token.
-- A table of its own (not a column of quality_items): ClickHouse 18.16
-- has no ALTER TABLE ... ADD COLUMN IF NOT EXISTS, and every statement
-- of a migration must be safe to apply twice.
CREATE TABLE IF NOT EXISTS quality_answers (
    ts_ms          UInt64,
    campaign       String,
    suite_version  String,
    submission_id  String,
    role           String,
    item_id        String,
    sample         UInt32,
    score          Float64,
    output_tokens  UInt32,
    answer         String
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(toDateTime(intDiv(ts_ms, 1000)))
ORDER BY (campaign, suite_version, submission_id, role, item_id, sample);
