module github.com/lowbarena/lowbarena/tools/simengine

go 1.26.0

require (
	github.com/lowbarena/lowbarena/services/contract v0.0.0
	github.com/lowbarena/lowbarena/services/quality v0.0.0-00010101000000-000000000000
	github.com/lowbarena/lowbarena/services/runner v0.0.0
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

replace (
	github.com/lowbarena/lowbarena/events => ../../events
	github.com/lowbarena/lowbarena/observability => ../../observability
	github.com/lowbarena/lowbarena/schemas => ../../schemas
	github.com/lowbarena/lowbarena/services/contract => ../../services/contract
	github.com/lowbarena/lowbarena/services/quality => ../../services/quality
	github.com/lowbarena/lowbarena/services/runner => ../../services/runner
	github.com/lowbarena/lowbarena/services/runtime => ../../services/runtime
	github.com/lowbarena/lowbarena/services/store => ../../services/store
)
