module github.com/lowbarena/lowbarena/services/runner

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
