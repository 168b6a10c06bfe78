//go:build ignore

// gen writes reasons_generated.go and ../../docs/reasons.md from
// reasons.json. Run it with go generate ./events/reason.
package main

import (
	"log"
	"os"

	"github.com/lowbarena/lowbarena/events/reason/internal/catalogue"
)

func main() {
	data, err := os.ReadFile("reasons.json")
	if err != nil {
		log.Fatal(err)
	}
	es, err := catalogue.Parse(data)
	if err != nil {
		log.Fatal(err)
	}
	src, err := catalogue.Go(es)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("reasons_generated.go", src, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("../../docs/reasons.md", catalogue.Markdown(es), 0o644); err != nil {
		log.Fatal(err)
	}
}
