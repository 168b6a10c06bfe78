module github.com/lowbarena/lowbarena/services/efficiency

go 1.26.0

replace (
	github.com/lowbarena/lowbarena/events => ../../events
	github.com/lowbarena/lowbarena/observability => ../../observability
	github.com/lowbarena/lowbarena/schemas => ../../schemas
)
