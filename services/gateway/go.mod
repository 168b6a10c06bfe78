module github.com/lowbarena/lowbarena/services/gateway

go 1.26.0
