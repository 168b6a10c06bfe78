module github.com/lowbarena/lowbarena/tools/arena

go 1.26.0
