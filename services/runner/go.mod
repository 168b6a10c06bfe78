module github.com/lowbarena/lowbarena/services/runner

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/lowbarena/lowbarena/events v0.0.0-00010101000000-000000000000
	github.com/lowbarena/lowbarena/services/efficiency v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

replace (
	github.com/lowbarena/lowbarena/events => ../../events
	github.com/lowbarena/lowbarena/observability => ../../observability
	github.com/lowbarena/lowbarena/schemas => ../../schemas
	github.com/lowbarena/lowbarena/services/efficiency => ../efficiency
	github.com/lowbarena/lowbarena/services/runtime => ../runtime
	github.com/lowbarena/lowbarena/services/store => ../store
)
