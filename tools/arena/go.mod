module github.com/lowbarena/lowbarena/tools/arena

go 1.26.0

require (
	github.com/lowbarena/lowbarena/events v0.0.0
	github.com/lowbarena/lowbarena/observability v0.0.0
	github.com/lowbarena/lowbarena/schemas v0.0.0
	github.com/lowbarena/lowbarena/services/gateway v0.0.0
	github.com/lowbarena/lowbarena/services/runtime v0.0.0
	github.com/lowbarena/lowbarena/services/store v0.0.0
)

replace (
	github.com/lowbarena/lowbarena/events => ../../events
	github.com/lowbarena/lowbarena/observability => ../../observability
	github.com/lowbarena/lowbarena/schemas => ../../schemas
	github.com/lowbarena/lowbarena/services/gateway => ../../services/gateway
	github.com/lowbarena/lowbarena/services/runtime => ../../services/runtime
	github.com/lowbarena/lowbarena/services/store => ../../services/store
)
