module github.com/lowbarena/lowbarena/services/runner

go 1.26.0
