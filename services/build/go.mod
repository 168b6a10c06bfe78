module github.com/lowbarena/lowbarena/services/build

go 1.26.0

require (
	github.com/lowbarena/lowbarena/events v0.0.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/cloudevents/sdk-go/v2 v2.16.2 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/lowbarena/lowbarena/observability v0.0.0 // indirect
	github.com/lowbarena/lowbarena/schemas v0.0.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace (
	github.com/lowbarena/lowbarena/events => ../../events
	github.com/lowbarena/lowbarena/observability => ../../observability
	github.com/lowbarena/lowbarena/schemas => ../../schemas
	github.com/lowbarena/lowbarena/services/runtime => ../runtime
	github.com/lowbarena/lowbarena/services/store => ../store
)
