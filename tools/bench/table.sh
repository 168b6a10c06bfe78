#!/usr/bin/env bash
# table.sh runs the benchmarks that measure the arena beside its raw floor
# (nats.go alone, clickhouse-go's column append, a hand-written chDB insert,
# a minimal streaming client), each pair in the same run on the same server,
# and prints one Markdown table with the load average before and after.
# `make bench` runs it. Nothing here asserts a time: the goals are printed
# beside the figures for the reader.
#
# BENCH_RAW=path also keeps the benchmarks' own output there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
raw=${BENCH_RAW:-$(mktemp)}
: >"$raw"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

run() { # module, benchmark regexp, benchtime, packages...
	local mod=$1 re=$2 n=$3
	shift 3
	(cd "$root/$mod" && go test -run '^$' -bench "$re" -benchtime "$n" "$@") >>"$raw" 2>&1 ||
		{ echo "table.sh: benchmarks in $mod failed:" >&2; tail -20 "$raw" >&2; exit 1; }
}
run platform '^BenchmarkHopVsRaw$' 3000x ./bus
run platform '^BenchmarkSustainedVsRaw$' 6x ./bus
run platform/store '^BenchmarkInsertVsRaw$' 40x ./clickhouse ./chdb
run services/runner '^BenchmarkCeilingVsMinimal$' 12x ./loadgen
run services/runner '^BenchmarkMediansAtConcurrency64$' 1x ./loadgen
run services/runner '^BenchmarkGPUSecondsPerVerdict$' 1x ./job
run tools/arena '^BenchmarkIntakeVsFloor$' 3x .
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

awk -v before="$load_before" -v after="$load_after" -v cpus="$(nproc)" '
/^pkg: / { pkg = $2; sub(/.*\//, "", pkg) }
/^Benchmark/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i += 2) m[pkg "/" name "/" $(i + 1)] = $i
}
function v(k) { if (!(k in m)) { missing = missing " " k; return "?" } return m[k] }
function n(x,    s) { # thousands separators
	x = sprintf("%.0f", x); s = ""
	while (length(x) > 3) { s = "," substr(x, length(x) - 2) s; x = substr(x, 1, length(x) - 3) }
	return x s
}
function row(path, r, a, ratio, goal) { printf "| %s | %s | %s | %s | %s |\n", path, r, a, ratio, goal }
END {
	h = "bus/BenchmarkHopVsRaw/"; s = "bus/BenchmarkSustainedVsRaw/"
	ch = "clickhouse/BenchmarkInsertVsRaw/"; cd = "chdb/BenchmarkInsertVsRaw/"
	lc = "loadgen/BenchmarkCeilingVsMinimal/"; lm = "loadgen/BenchmarkMediansAtConcurrency64/"
	ik = "arena/BenchmarkIntakeVsFloor/"
	printf "load average %s before, %s after (%d cores)\n\n", before, after, cpus
	print "| path | raw | arena | arena / raw | goal |"
	print "| --- | --- | --- | --- | --- |"
	row("one event hop, p50 / p99", sprintf("%.0f µs / %.0f µs", v(h "raw-p50-µs"), v(h "raw-p99-µs")),
		sprintf("%.0f µs / %.0f µs", v(h "arena-p50-µs"), v(h "arena-p99-µs")),
		sprintf("%.2fx / %.2fx", v(h "ratio-p50"), v(h "ratio-p99")), "at most 1.3x")
	row("sustained events, 64 publishers, ack after the handler", n(v(s "raw-events/s")) " ev/s", n(v(s "arena-events/s")) " ev/s",
		sprintf("%.2fx", v(s "ratio")), "at least 0.7x")
	row("10k-row gpu_samples batches into ClickHouse (server)", sprintf("%s rows/s, %.3f allocs/row", n(v(ch "raw-rows/s")), v(ch "raw-allocs/row")),
		sprintf("%s rows/s, %.3f allocs/row", n(v(ch "arena-rows/s")), v(ch "arena-allocs/row")), sprintf("%.2fx", v(ch "ratio")), "at least 0.9x, at most 1 alloc/row")
	row("10k-row gpu_samples batches into chDB", sprintf("%s rows/s, %.3f allocs/row", n(v(cd "raw-rows/s")), v(cd "raw-allocs/row")),
		sprintf("%s rows/s, %.3f allocs/row", n(v(cd "arena-rows/s")), v(cd "arena-allocs/row")), sprintf("%.2fx", v(cd "ratio")), "at least 0.9x, at most 1 alloc/row")
	row("load generator ceiling, engine in another process", n(v(lc "minimal-tokens/s")) " tokens/s",
		sprintf("%s tokens/s, %.2f allocs/token", n(v(lc "loadgen-tokens/s")), v(lc "loadgen-allocs/token")), sprintf("%.2fx", v(lc "ratio")), "at least 0.9x, counts exact")
	row("12 runs at concurrency 64: spread of the TTFT / TPOT medians; medians more than 20% off", sprintf("%.1f%% / %.1f%%; %d of 24", 100 * v(lm "minimal-ttft-spread"), 100 * v(lm "minimal-tpot-spread"), v(lm "minimal-runs-off")),
		sprintf("%.1f%% / %.1f%%; %d of 24", 100 * v(lm "loadgen-ttft-spread"), 100 * v(lm "loadgen-tpot-spread"), v(lm "loadgen-runs-off")), "", "as stable as the minimal client")
	gv = "job/BenchmarkGPUSecondsPerVerdict/"; gs = gv "separate/"; gq = gv "quality_first/"; ge = gv "efficiency_first/"
	row(sprintf("GPU-seconds held per verdict: efficiency + quality job, simengine imitating vLLM with %g s start-ups, reference cached; a start each / engine kept, quality job first / efficiency job first", v(gq "startup-s")),
		sprintf("%.1f s unavoidable (1 start + serving)", v(gq "unavoidable-s")),
		sprintf("%.1f / %.1f / %.1f s held; %d / %d / %d starts of %.1f s", v(gs "held-s"), v(gq "held-s"), v(ge "held-s"), v(gs "starts"), v(gq "starts"), v(ge "starts"), v(gq "start-s")),
		sprintf("%.2fx / %.2fx / %.2fx", v(gs "ratio"), v(gq "ratio"), v(ge "ratio")), "at most 1.3x")
	row(sprintf("intake: %d distinct bundles, upload + build + contract", v(ik "bundles")), sprintf("%.1f bundles/s", v(ik "floor-bundles/s")),
		sprintf("%.1f bundles/s", v(ik "arena-bundles/s")), sprintf("%.2fx", v(ik "ratio")), "at least 0.25x")
	if (missing != "") { print "\ntable.sh: no figure for" missing > "/dev/stderr"; exit 1 }
}' "$raw"
