package check

import (
	"fmt"
	"sort"
	"strings"
)

// Codes of the problems a check reports: stable, snake_case.
const (
	// CodeUnknownField: a manifest holds a field its Kubernetes type has
	// not (or one twice); strict decoding refuses it.
	CodeUnknownField = "deploy_unknown_field"
	// CodeUnknownKind: a manifest's apiVersion and kind are no type of
	// client-go's scheme.
	CodeUnknownKind = "deploy_unknown_kind"
	// CodeMissingService: a service binary has no container.
	CodeMissingService = "deploy_missing_service"
	// CodeUnknownBinary: a container's image or build names no service.
	CodeUnknownBinary = "deploy_unknown_binary"
	// CodeUnknownEnv: a container sets a LOWBARENA_ variable its binary
	// does not read.
	CodeUnknownEnv = "deploy_unknown_env"
	// CodeUnknownFlag: a container's command holds a flag its binary has
	// not, or a word that is no subcommand.
	CodeUnknownFlag = "deploy_unknown_flag"
	// CodeMissingEnv: a binary that needs a setting (the store, the
	// campaigns, NATS) is not given it.
	CodeMissingEnv = "deploy_missing_env"
	// CodeWrongCredentials: a container connects as another service's
	// NATS user, or with no credentials.
	CodeWrongCredentials = "deploy_wrong_credentials"
	// CodeMissingVolume: a folder setting points at no mounted volume, or
	// a mount at no volume.
	CodeMissingVolume = "deploy_missing_volume"
	// CodeNoGPU: the runner asks for no GPU.
	CodeNoGPU = "deploy_no_gpu"
	// CodeSelector: a workload's selector does not match its pods' labels.
	CodeSelector = "deploy_selector_mismatch"
	// CodeNATS: NATS's Helm values do not make the cluster the arena needs.
	CodeNATS = "deploy_nats_values"
)

// Problem is one thing a deployment file gets wrong.
type Problem struct {
	// Code is one of the codes above.
	Code string
	// Where names the file and the service or object.
	Where string
	// Detail says what is wrong and what to do, for the operator.
	Detail string
}

func (p Problem) String() string { return fmt.Sprintf("%s: %s: %s", p.Where, p.Code, p.Detail) }

// Problems are a check's findings.
type Problems []Problem

func (ps *Problems) add(code, where, format string, args ...any) {
	*ps = append(*ps, Problem{Code: code, Where: where, Detail: fmt.Sprintf(format, args...)})
}

// Codes lists the problems' codes, sorted, once each.
func (ps Problems) Codes() []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range ps {
		if !seen[p.Code] {
			seen[p.Code] = true
			out = append(out, p.Code)
		}
	}
	sort.Strings(out)
	return out
}

func (ps Problems) String() string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}
