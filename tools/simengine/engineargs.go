package main

import (
	"fmt"
	"strconv"
	"strings"
)

// argKind is how an engine flag takes its value, as Python's argparse
// declares it.
type argKind int

// The kinds of engine flag.
const (
	argString       argKind = iota // --flag VALUE
	argInt                         // --flag N (type=int)
	argHumanInt                    // --flag N, also 4k / 4K / 1m / 1M (vLLM's human_readable_int)
	argFloat                       // --flag X (type=float)
	argStoreTrue                   // --flag (action="store_true")
	argBoolOptional                // --flag / --no-flag (argparse.BooleanOptionalAction)
	argMulti                       // --flag V [V ...] (nargs="+")
)

// argSpec is one engine flag: its destination, option strings (the first
// is the one error messages name first), kind and choices.
type argSpec struct {
	Dest    string
	Flags   []string
	Kind    argKind
	Choices []string
}

// ArgParser imitates the argparse parser of an engine's command line:
// --flag value and --flag=value, store_true and BooleanOptional flags,
// typed values, choices, one optional positional, and argparse's refusals
// in its words. Usage lines are shortened to their first words (argparse
// prints every option; nothing reads them).
type ArgParser struct {
	Prog  string // the prog an argument's own error names (e.g. "vllm serve")
	Usage string // the usage line of Prog, without "usage: "
	// UnrecognizedProg and UnrecognizedUsage are the parser that reports
	// unrecognized arguments: with subcommands, the top-level one (vLLM's
	// "vllm"); empty means Prog and Usage.
	UnrecognizedProg, UnrecognizedUsage string
	Specs                               []argSpec
	// Positional is the Dest of an optional positional (nargs="?"), or "".
	Positional string
	// Required lists the Dests argparse requires.
	Required []string
	// Abbrev accepts unique prefixes of long options (argparse's
	// allow_abbrev, on by default).
	Abbrev bool
	// Underscores turns "_" into "-" in option names first, as vLLM's
	// FlexibleArgumentParser does (--max_model_len is --max-model-len).
	Underscores bool
}

// ArgError is a refusal of argparse: it prints the usage line and
// "<prog>: error: <message>" and exits with status 2.
type ArgError struct {
	Usage, Prog, Msg string
}

func (e *ArgError) Error() string {
	return "usage: " + e.Usage + "\n" + e.Prog + ": error: " + e.Msg
}

// ParsedArgs holds the values given on the command line by Dest.
type ParsedArgs struct {
	Values map[string]string
	Multi  map[string][]string
	Bools  map[string]bool
}

// Given reports whether the command line set dest.
func (a ParsedArgs) Given(dest string) bool {
	_, v := a.Values[dest]
	_, m := a.Multi[dest]
	_, b := a.Bools[dest]
	return v || m || b
}

// Str returns dest's value, or def when not given.
func (a ParsedArgs) Str(dest, def string) string {
	if v, ok := a.Values[dest]; ok {
		return v
	}
	return def
}

// Int returns dest's value, or def when not given; the parser already
// checked it is an integer.
func (a ParsedArgs) Int(dest string, def int64) int64 {
	v, ok := a.Values[dest]
	if !ok {
		return def
	}
	n, _ := parseHumanInt(v)
	return n
}

// Float returns dest's value, or def when not given.
func (a ParsedArgs) Float(dest string, def float64) float64 {
	v, ok := a.Values[dest]
	if !ok {
		return def
	}
	f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
	return f
}

// Bool returns dest's value, or def when not given.
func (a ParsedArgs) Bool(dest string, def bool) bool {
	if v, ok := a.Bools[dest]; ok {
		return v
	}
	return def
}

// parseHumanInt reads an integer with an optional k/K/m/M/g/G suffix
// (lower case powers of 1000, upper case of 1024), as vLLM's
// human_readable_int does; a plain integer is what argparse's int takes.
func parseHumanInt(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	if n := len(s); n > 1 {
		switch s[n-1] {
		case 'k':
			mult = 1000
		case 'K':
			mult = 1 << 10
		case 'm':
			mult = 1000 * 1000
		case 'M':
			mult = 1 << 20
		case 'g':
			mult = 1000 * 1000 * 1000
		case 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			s = s[:n-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not an integer: %w", err)
	}
	return n * mult, nil
}

// flagLike reports whether an argument is an option string as argparse
// sees one: it starts with "-", and is not a negative number.
func flagLike(s string) bool {
	if len(s) < 2 || s[0] != '-' {
		return false
	}
	_, err := strconv.ParseFloat(s, 64)
	return err != nil
}

func (p ArgParser) errorf(format string, a ...any) *ArgError {
	return &ArgError{Usage: p.Usage, Prog: p.Prog, Msg: fmt.Sprintf(format, a...)}
}

// lookup finds the spec of an option string: exactly, as --no-X of a
// BooleanOptional flag, or by a unique prefix when Abbrev is set.
func (p ArgParser) lookup(name string) (spec *argSpec, negated bool, err *ArgError) {
	for i := range p.Specs {
		s := &p.Specs[i]
		for _, f := range s.Flags {
			if f == name {
				return s, false, nil
			}
			if s.Kind == argBoolOptional && strings.HasPrefix(f, "--") && "--no-"+f[2:] == name {
				return s, true, nil
			}
		}
	}
	if !p.Abbrev || !strings.HasPrefix(name, "--") {
		return nil, false, nil
	}
	var matches []string
	var found *argSpec
	for i := range p.Specs {
		for _, f := range p.Specs[i].Flags {
			if strings.HasPrefix(f, name) {
				matches = append(matches, f)
				found = &p.Specs[i]
			}
		}
	}
	switch len(matches) {
	case 0:
		return nil, false, nil
	case 1:
		return found, false, nil
	}
	return nil, false, p.errorf("ambiguous option: %s could match %s", name, strings.Join(matches, ", "))
}

// Parse reads an engine's arguments (after the executable and its
// subcommand) as the engine's argparse would, or returns its *ArgError.
// Errors in a flag's value come first, in order, then a missing required
// argument, then every unrecognized argument together, as argparse
// reports them.
func (p ArgParser) Parse(args []string) (ParsedArgs, error) { //nolint:gocyclo // argparse's consumption loop: each kind of flag is a case of it
	out := ParsedArgs{Values: map[string]string{}, Multi: map[string][]string{}, Bools: map[string]bool{}}
	var unrecognized []string
	positionalTaken := false
	onlyPositionals := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !onlyPositionals && a == "--" {
			onlyPositionals = true
			continue
		}
		if onlyPositionals || !flagLike(a) {
			if p.Positional != "" && !positionalTaken {
				out.Values[p.Positional] = a
				positionalTaken = true
				continue
			}
			unrecognized = append(unrecognized, a)
			continue
		}
		name, val, hasEq := strings.Cut(a, "=")
		if p.Underscores && strings.HasPrefix(name, "--") {
			name = strings.ReplaceAll(name, "_", "-")
		}
		spec, negated, err := p.lookup(name)
		if err != nil {
			return out, err
		}
		if spec == nil {
			unrecognized = append(unrecognized, a)
			continue
		}
		optNames := strings.Join(spec.Flags, "/")
		switch spec.Kind {
		case argStoreTrue, argBoolOptional:
			if hasEq {
				return out, p.errorf("argument %s: ignored explicit argument '%s'", optNames, val)
			}
			out.Bools[spec.Dest] = !negated
			continue
		case argMulti:
			var vals []string
			if hasEq {
				vals = append(vals, val)
			}
			for !hasEq && i+1 < len(args) && !flagLike(args[i+1]) && args[i+1] != "--" {
				i++
				vals = append(vals, args[i])
			}
			if len(vals) == 0 {
				return out, p.errorf("argument %s: expected at least one argument", optNames)
			}
			out.Multi[spec.Dest] = vals
			continue
		}
		if !hasEq {
			if i+1 >= len(args) || flagLike(args[i+1]) || args[i+1] == "--" {
				return out, p.errorf("argument %s: expected one argument", optNames)
			}
			i++
			val = args[i]
		}
		switch spec.Kind {
		case argInt:
			if _, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64); err != nil {
				return out, p.errorf("argument %s: invalid int value: '%s'", optNames, val)
			}
		case argHumanInt:
			if _, err := parseHumanInt(val); err != nil {
				return out, p.errorf("argument %s: invalid human_readable_int value: '%s'", optNames, val)
			}
		case argFloat:
			if _, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err != nil {
				return out, p.errorf("argument %s: invalid float value: '%s'", optNames, val)
			}
		}
		if len(spec.Choices) > 0 && !containsString(spec.Choices, val) {
			return out, p.errorf("argument %s: invalid choice: '%s' (choose from %s)", optNames, val, strings.Join(spec.Choices, ", "))
		}
		out.Values[spec.Dest] = val
	}
	var missing []string
	for _, dest := range p.Required {
		if !out.Given(dest) {
			for _, s := range p.Specs {
				if s.Dest == dest {
					missing = append(missing, strings.Join(s.Flags, "/"))
				}
			}
		}
	}
	if len(missing) > 0 {
		return out, p.errorf("the following arguments are required: %s", strings.Join(missing, ", "))
	}
	if len(unrecognized) > 0 {
		e := &ArgError{Usage: p.Usage, Prog: p.Prog, Msg: "unrecognized arguments: " + strings.Join(unrecognized, " ")}
		if p.UnrecognizedProg != "" {
			e.Usage, e.Prog = p.UnrecognizedUsage, p.UnrecognizedProg
		}
		return out, e
	}
	return out, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
