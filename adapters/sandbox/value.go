package sandbox

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// value is a built-in Python value read from its canonical encoding (see
// python/canon.py): what a check expects, or what the program's function
// returned.
type value struct {
	// kind is the encoding's tag: N (None), T, F (bools), i, f, s (str), b
	// (bytes), l (list), t (tuple), S (set), Z (frozenset), d (dict).
	kind byte
	n    *big.Int
	f    float64
	// s is a str's UTF-8 (lone surrogates as CESU-8 bytes) or a bytes'
	// bytes.
	s string
	// items are a sequence's items in order, a set's members and a dict's
	// keys and values (k0, v0, k1, v1, ...), both ordered by the encoding
	// of the member or key.
	items []value
	// enc is the value's own encoding, the order and identity of set
	// members and dict keys.
	enc string
}

// maxDepth bounds the nesting the reader accepts; the encoder refuses
// values nested deeper than 100.
const maxDepth = 128

// floatTolerance is the relative and absolute tolerance of a comparison
// in which a float takes part: math.isclose(got, want, rel_tol=1e-9,
// abs_tol=1e-9).
const floatTolerance = 1e-9

var errEncoding = errors.New("not a canonical encoding")

// parseValue reads one encoded value, the whole of s.
func parseValue(s string) (value, error) {
	v, rest, err := parseOne(s, 0)
	if err != nil {
		return value{}, err
	}
	if rest != "" {
		return value{}, fmt.Errorf("%w: %d bytes after the value", errEncoding, len(rest))
	}
	return v, nil
}

// parseOne reads the value at the start of s and returns the rest.
func parseOne(s string, depth int) (value, string, error) {
	if depth > maxDepth {
		return value{}, "", fmt.Errorf("%w: nested deeper than %d", errEncoding, maxDepth)
	}
	if s == "" {
		return value{}, "", fmt.Errorf("%w: cut short", errEncoding)
	}
	start := s
	v := value{kind: s[0]}
	s = s[1:]
	// field is the text up to the next ';'.
	field := func() (string, error) {
		i := strings.IndexByte(s, ';')
		if i < 0 {
			return "", fmt.Errorf("%w: %q without its ';'", errEncoding, v.kind)
		}
		f := s[:i]
		s = s[i+1:]
		return f, nil
	}
	switch v.kind {
	case 'N', 'T', 'F':
	case 'i':
		f, err := field()
		if err != nil {
			return value{}, "", err
		}
		n, ok := new(big.Int).SetString(f, 16)
		if !ok || f == "" || f[0] == '+' {
			return value{}, "", fmt.Errorf("%w: int %q", errEncoding, f)
		}
		v.n = n
	case 'f':
		f, err := field()
		if err != nil {
			return value{}, "", err
		}
		x, err := strconv.ParseFloat(f, 64)
		if err != nil || strings.Contains(f, "_") || strings.HasPrefix(strings.TrimPrefix(f, "-"), "0x") {
			return value{}, "", fmt.Errorf("%w: float %q", errEncoding, f)
		}
		v.f = x
	case 's', 'b':
		f, err := field()
		if err != nil {
			return value{}, "", err
		}
		b, err := hex.DecodeString(f)
		if err != nil {
			return value{}, "", fmt.Errorf("%w: %q: %w", errEncoding, v.kind, err)
		}
		v.s = string(b)
	case 'l', 't', 'S', 'Z', 'd':
		f, err := field()
		if err != nil {
			return value{}, "", err
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > len(s) || strconv.Itoa(n) != f {
			return value{}, "", fmt.Errorf("%w: count %q", errEncoding, f)
		}
		if v.kind == 'd' {
			n *= 2
		}
		v.items = make([]value, 0, n)
		for range n {
			var item value
			item, s, err = parseOne(s, depth+1)
			if err != nil {
				return value{}, "", err
			}
			v.items = append(v.items, item)
		}
		switch v.kind {
		case 'S', 'Z':
			slices.SortFunc(v.items, func(a, b value) int { return strings.Compare(a.enc, b.enc) })
		case 'd':
			sortPairs(v.items)
		}
	default:
		return value{}, "", fmt.Errorf("%w: unknown tag %q", errEncoding, v.kind)
	}
	v.enc = start[:len(start)-len(s)]
	return v, s, nil
}

// sortPairs orders a dict's items (k0, v0, k1, v1, ...) by the encoding
// of their keys.
func sortPairs(items []value) {
	type pair struct{ k, v value }
	pairs := make([]pair, len(items)/2)
	for i := range pairs {
		pairs[i] = pair{items[2*i], items[2*i+1]}
	}
	slices.SortFunc(pairs, func(a, b pair) int { return strings.Compare(a.k.enc, b.k.enc) })
	for i, p := range pairs {
		items[2*i], items[2*i+1] = p.k, p.v
	}
}

// equal reports whether got is want: the same built-in type all the way
// down (a bool is not an int, a tuple not a list, a set not a frozenset),
// equal strs, bytes and ints, a dict's keys and a set's members equal as
// encoded (exactly, their types included), and numbers within
// floatTolerance where a float takes part (an int and a float compare by
// value, as Python's == does; NaN equals nothing).
func equal(want, got value) bool {
	if isNumber(want) && isNumber(got) {
		if want.kind == 'i' && got.kind == 'i' {
			return want.n.Cmp(got.n) == 0
		}
		return closeFloats(want.float(), got.float())
	}
	if want.kind != got.kind || len(want.items) != len(got.items) {
		return false
	}
	switch want.kind {
	case 's', 'b':
		return want.s == got.s
	case 'S', 'Z':
		return want.enc == got.enc || membersEqual(want.items, got.items)
	case 'd':
		for i := 0; i < len(want.items); i += 2 {
			if want.items[i].enc != got.items[i].enc || !equal(want.items[i+1], got.items[i+1]) {
				return false
			}
		}
		return true
	}
	for i := range want.items {
		if !equal(want.items[i], got.items[i]) {
			return false
		}
	}
	return true
}

func membersEqual(a, b []value) bool {
	for i := range a {
		if a[i].enc != b[i].enc {
			return false
		}
	}
	return true
}

func isNumber(v value) bool { return v.kind == 'i' || v.kind == 'f' }

// float is a number's value as a float64 (an int beyond float64's range
// is an infinity).
func (v value) float() float64 {
	if v.kind == 'f' {
		return v.f
	}
	f, _ := new(big.Float).SetInt(v.n).Float64()
	return f
}

// closeFloats is math.isclose(a, b, rel_tol=floatTolerance,
// abs_tol=floatTolerance).
func closeFloats(a, b float64) bool {
	if a == b {
		return true
	}
	if math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return false
	}
	return math.Abs(a-b) <= max(floatTolerance*max(math.Abs(a), math.Abs(b)), floatTolerance)
}

// maxShown bounds a value as a Detail shows it.
const maxShown = 120

// String writes v as Python would (repr), shortened to about maxShown
// bytes.
func (v value) String() string {
	var b strings.Builder
	v.write(&b)
	s := b.String()
	if len(s) > maxShown {
		cut := maxShown
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func (v value) write(b *strings.Builder) {
	if b.Len() > maxShown {
		return
	}
	switch v.kind {
	case 'N':
		b.WriteString("None")
	case 'T':
		b.WriteString("True")
	case 'F':
		b.WriteString("False")
	case 'i':
		b.WriteString(v.n.String())
	case 'f':
		b.WriteString(pyFloat(v.f))
	case 's':
		b.WriteString(pyQuote(v.s))
	case 'b':
		b.WriteString("b" + pyQuote(v.s))
	case 'l':
		v.writeItems(b, "[", "]", 1)
	case 't':
		if len(v.items) == 1 {
			v.writeItems(b, "(", ",)", 1)
		} else {
			v.writeItems(b, "(", ")", 1)
		}
	case 'S':
		if len(v.items) == 0 {
			b.WriteString("set()")
		} else {
			v.writeItems(b, "{", "}", 1)
		}
	case 'Z':
		if len(v.items) == 0 {
			b.WriteString("frozenset()")
		} else {
			v.writeItems(b, "frozenset({", "})", 1)
		}
	case 'd':
		v.writeItems(b, "{", "}", 2)
	}
}

// writeItems writes v's items between open and end, per (1) or in pairs
// (2, key: value).
func (v value) writeItems(b *strings.Builder, open, end string, per int) {
	b.WriteString(open)
	for i := 0; i < len(v.items); i += per {
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len() > maxShown {
			b.WriteString("…")
			break
		}
		v.items[i].write(b)
		if per == 2 {
			b.WriteString(": ")
			v.items[i+1].write(b)
		}
	}
	b.WriteString(end)
}

// pyFloat writes f as Python's repr does.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		// Go, as Python, writes the exponent with two digits at least.
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// pyQuote writes s between single quotes, escaping as Python's repr does
// closely enough for a Detail.
func pyQuote(s string) string {
	q := strconv.Quote(s)
	q = strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
	return "'" + strings.ReplaceAll(q, "'", `\'`) + "'"
}
