module github.com/lowbarena/lowbarena/services/store

go 1.26.0

require (
	github.com/chdb-io/chdb-go v1.11.0
	github.com/lowbarena/lowbarena/schemas v0.0.0
)

require (
	github.com/ebitengine/purego v0.10.1 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.14.0 // indirect
)

replace github.com/lowbarena/lowbarena/schemas => ../../schemas
