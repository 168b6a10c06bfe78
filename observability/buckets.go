package observability

// DurationBuckets are the bucket bounds, in seconds, of the arena's
// duration histograms (unit "s"). The SDK's default bounds (0, 5, 10,
// 25 … 10000) are meant for milliseconds: in seconds they put every
// handler that takes under five seconds, nearly all of them, into one
// bucket, and a Prometheus histogram_quantile over them says nothing.
// These run from a millisecond (a KV read, a refusal) to an hour (a
// quality evaluation or an efficiency sweep of a large checkpoint).
var DurationBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
}
