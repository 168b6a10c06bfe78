module github.com/lowbarena/lowbarena/services/runtime

go 1.26.0
