module github.com/lowbarena/lowbarena/tools/simengine

go 1.26.0

require (
	github.com/lowbarena/lowbarena/services/runner v0.0.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/lowbarena/lowbarena/services/domain v0.0.0
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

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

replace github.com/lowbarena/lowbarena/services/domain => ../../services/domain
