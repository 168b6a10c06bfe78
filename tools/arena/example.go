package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/lowbarena/lowbarena/domain/examples"
	"github.com/lowbarena/lowbarena/domain/suite"
)

// cmdExample writes the example campaign and bundles: small real
// checkpoints of a tiny model of the campaign's family, honest and not.
func cmdExample(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("example", stderr)
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("example takes one folder (arena example DIR)")
	}
	exs, err := writeExamples(pos[0])
	if err != nil {
		return err
	}
	dir, _ := filepath.Abs(pos[0])
	fmt.Fprintf(stdout, "campaign %s in %s\n", examples.TaskID, filepath.Join(dir, examples.CampaignsDir, examples.TaskID))
	for _, ex := range exs {
		verdict := "should pass"
		if !ex.Honest {
			verdict = "should be refused: " + fmt.Sprint(ex.Violations)
		}
		fmt.Fprintf(stdout, "  %-26s declares %-11s reads %-11s %s\n", ex.Name, ex.Declared, ex.Detected, verdict)
	}
	fmt.Fprintf(stdout, "bundles in %s; run them with: arena demo --data DIR --campaigns %s %s/*\n",
		filepath.Join(dir, examples.SubmissionsDir), filepath.Join(dir, examples.CampaignsDir), filepath.Join(dir, examples.SubmissionsDir))
	return nil
}

// SuiteName and SuiteVersion name the shipped generated suite.
const (
	SuiteName    = "lowb-gen"
	SuiteVersion = "1"
)

// writeExamples writes the example campaign and bundles, and the
// campaign's dev eval suite, generated from its seed.
func writeExamples(dir string) ([]examples.Example, error) {
	exs, err := examples.Write(dir)
	if err != nil {
		return nil, err
	}
	s := suite.Generate(SuiteName, SuiteVersion, suite.SplitDev, suite.SeedDev, suite.DevSizes)
	if err := suite.Write(filepath.Join(dir, examples.CampaignsDir, examples.TaskID, "suite-dev"), s); err != nil {
		return nil, err
	}
	// The held-out ranked split: another seed, never shown to participants.
	ranked := suite.Generate(SuiteName, SuiteVersion, suite.SplitRanked, suite.SeedRanked, suite.DevSizes)
	if err := suite.Write(filepath.Join(dir, examples.CampaignsDir, examples.TaskID, "suite-ranked"), ranked); err != nil {
		return nil, err
	}
	return exs, nil
}
