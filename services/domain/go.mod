module github.com/lowbarena/lowbarena/services/domain

go 1.26.0

require (
	github.com/lowbarena/lowbarena/schemas v0.0.0
	github.com/stretchr/testify v1.12.1
	golang.org/x/crypto v0.58.0
	golang.org/x/sys v0.49.0
	golang.org/x/text v0.43.0
)

require (
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/lowbarena/lowbarena/schemas => ../../schemas
