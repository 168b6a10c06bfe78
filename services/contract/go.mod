module github.com/lowbarena/lowbarena/services/contract

go 1.26.0

require github.com/stretchr/testify v1.12.1

require (
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	golang.org/x/text v0.43.0 // indirect
)

require (
	github.com/lowbarena/lowbarena/events v0.0.0-00010101000000-000000000000
	github.com/lowbarena/lowbarena/schemas v0.0.0-00010101000000-000000000000
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/lowbarena/lowbarena/events => ../../events

replace github.com/lowbarena/lowbarena/observability => ../../observability

replace github.com/lowbarena/lowbarena/schemas => ../../schemas
