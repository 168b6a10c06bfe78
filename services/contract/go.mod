module github.com/lowbarena/lowbarena/services/contract

go 1.26.0
