module github.com/lowbarena/lowbarena/services/quality

go 1.26.0

replace (
	github.com/lowbarena/lowbarena/events => ../../events
	github.com/lowbarena/lowbarena/observability => ../../observability
	github.com/lowbarena/lowbarena/schemas => ../../schemas
	github.com/lowbarena/lowbarena/services/contract => ../contract
	github.com/lowbarena/lowbarena/services/efficiency => ../efficiency
	github.com/lowbarena/lowbarena/services/runtime => ../runtime
	github.com/lowbarena/lowbarena/services/store => ../store
)

require github.com/stretchr/testify v1.12.1

require go.yaml.in/yaml/v3 v3.0.5 // indirect
