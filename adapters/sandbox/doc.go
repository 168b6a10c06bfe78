// Package sandbox runs the code answers of an eval suite: its CodeGrader
// runs a model's Python program and the item's tests under bubblewrap, as
// an unprivileged user in namespaces of its own, with no network and
// nothing of the host but a read-only /usr (see CodeGrader for the whole
// sandbox), and SweepOrphans ends the sandbox inits a killed grader left
// behind.
//
// It is an adapter of the pure grade package: importing it registers the
// code grader under suite.GraderCode in grade's package-level registry, so
// grade.For, grade.Grade and grade.Check reach it.
package sandbox

import (
	"github.com/lowbarena/lowbarena/domain/grade"
	"github.com/lowbarena/lowbarena/domain/suite"
)

func init() { grade.Register(suite.GraderCode, &CodeGrader{}) }
