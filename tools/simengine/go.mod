module github.com/lowbarena/lowbarena/tools/simengine

go 1.26.0

require github.com/stretchr/testify v1.12.1

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/text v0.43.0 // indirect
)

require (
	github.com/lowbarena/lowbarena v0.0.0
	github.com/lowbarena/lowbarena/services/runner v0.0.0
)

// The arena's own modules, for a build outside the workspace (GOWORK=off);
// each is one this module imports, directly or through another.
replace (
	github.com/lowbarena/lowbarena => ../..
	github.com/lowbarena/lowbarena/services/runner => ../../services/runner
)
