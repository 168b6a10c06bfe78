package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The fast path: the arena's schemas compiled once into checks that run
// over the JSON bytes themselves, in one pass, without building a tree of
// values first (what the general validator does for every payload).
//
// It only ever accepts. A payload it finds invalid, or cannot decide (a
// key twice in one object, a number it would need exact arithmetic for,
// bytes that are not JSON), goes to the general validator
// (santhosh-tekuri/jsonschema), whose answer and message stand. So the
// fast path can change how long validation takes, never its outcome, as
// long as it accepts nothing the general validator refuses:
// TestFastPathAgreesWithTheLibrary and FuzzFastPathNeverAcceptsMore hold
// it to that.
//
// It compiles the keywords the arena's schemas use (draft 2020-12): type,
// const and enum of strings, properties, required, additionalProperties,
// items, prefixItems, minItems, maxItems, minimum, maximum, minLength,
// maxLength, pattern (Go's regexp, as the general validator's default),
// format (checked by the general validator's own format on the decoded
// string), $ref within and across the embedded schemas, allOf, anyOf and
// oneOf, and the annotations. A schema with any other keyword is not
// compiled, and its payloads all take the general validator.

// fastNode is one compiled schema.
type fastNode struct {
	// never is the false schema; a nil node (or the true schema) takes
	// anything.
	never bool

	types    uint8 // a set of fastType bits; 0 means any type
	strEnum  []string
	hasEnum  bool
	minimum  *big.Rat
	maximum  *big.Rat
	minInt   int64 // minimum as an int64 when minIntOK
	maxInt   int64
	minIntOK bool
	maxIntOK bool

	minLength, maxLength int // -1: none
	pattern              *regexp.Regexp
	format               *jsonschema.Schema // the general validator's {"format": F}

	props      map[string]*fastNode
	required   []string
	additional *fastNode // nil: anything; never: no other property
	hasAddl    bool

	prefixItems        []*fastNode
	items              *fastNode
	minItems, maxItems int // -1: none

	ref                 *fastNode
	allOf, anyOf, oneOf []*fastNode
}

const (
	tNull uint8 = 1 << iota
	tBool
	tInteger
	tNumber // number: any number, integer or not
	tString
	tArray
	tObject
)

// annotations and structure the fast path may ignore: they never change
// whether a payload is valid.
var fastIgnored = map[string]bool{
	"$schema": true, "$id": true, "$defs": true, "$comment": true, "title": true,
	"description": true, "examples": true, "default": true, "deprecated": true,
	"readOnly": true, "writeOnly": true,
}

// fastCompiler compiles the embedded schemas' documents.
type fastCompiler struct {
	docs    map[string]any // by document URL
	nodes   map[string]*fastNode
	formats map[string]*jsonschema.Schema
}

func newFastCompiler(docs map[string]any) *fastCompiler {
	return &fastCompiler{docs: docs, nodes: map[string]*fastNode{}, formats: map[string]*jsonschema.Schema{}}
}

// compile compiles the schema at url (a document URL, with an optional
// #/json/pointer); an error means the fast path does not cover it.
func (c *fastCompiler) compile(url string) (*fastNode, error) {
	doc, frag, _ := strings.Cut(url, "#")
	key := doc + "#" + frag
	if n, ok := c.nodes[key]; ok {
		return n, nil
	}
	root, ok := c.docs[doc]
	if !ok {
		return nil, fmt.Errorf("fast path: no document %s", doc)
	}
	v := root
	if frag != "" {
		if !strings.HasPrefix(frag, "/") {
			return nil, fmt.Errorf("fast path: fragment %q is not a JSON pointer", frag)
		}
		for _, tok := range strings.Split(frag[1:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			m, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("fast path: %s does not resolve", url)
			}
			if v, ok = m[tok]; !ok {
				return nil, fmt.Errorf("fast path: %s does not resolve", url)
			}
		}
	}
	n := &fastNode{}
	// Registered before its children, so a schema that refers to itself
	// compiles.
	c.nodes[key] = n
	if err := c.fill(n, v, doc, key); err != nil {
		return nil, err
	}
	return n, nil
}

// sub compiles a subschema found at pointer within doc.
func (c *fastCompiler) sub(v any, doc, at string) (*fastNode, error) {
	n := &fastNode{}
	if err := c.fill(n, v, doc, at); err != nil {
		return nil, err
	}
	return n, nil
}

func (c *fastCompiler) fill(n *fastNode, v any, doc, at string) error {
	n.minLength, n.maxLength, n.minItems, n.maxItems = -1, -1, -1, -1
	switch s := v.(type) {
	case bool:
		n.never = !s
		return nil
	case map[string]any:
		for k, kv := range s {
			if fastIgnored[k] {
				if k == "$id" && at != doc+"#" {
					return fmt.Errorf("fast path: %s: $id inside a schema", at)
				}
				continue
			}
			if err := c.keyword(n, k, kv, doc, at+"/"+k); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("fast path: %s: a schema must be an object or a boolean", at)
	}
}

func (c *fastCompiler) keyword(n *fastNode, k string, v any, doc, at string) error {
	switch k {
	case "type":
		names, ok := stringsOf(v)
		if !ok {
			return fmt.Errorf("fast path: %s: type", at)
		}
		for _, name := range names {
			bit, ok := map[string]uint8{"null": tNull, "boolean": tBool, "integer": tInteger, "number": tNumber,
				"string": tString, "array": tArray, "object": tObject}[name]
			if !ok {
				return fmt.Errorf("fast path: %s: type %q", at, name)
			}
			n.types |= bit
		}
	case "const":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("fast path: %s: only string consts are compiled", at)
		}
		n.strEnum, n.hasEnum = intersect(n.strEnum, n.hasEnum, []string{s}), true
	case "enum":
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("fast path: %s: enum", at)
		}
		var ss []string
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("fast path: %s: only enums of strings are compiled", at)
			}
			ss = append(ss, s)
		}
		n.strEnum, n.hasEnum = intersect(n.strEnum, n.hasEnum, ss), true
	case "minimum", "maximum":
		num, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("fast path: %s: a number", at)
		}
		r, ok := new(big.Rat).SetString(num.String())
		if !ok {
			return fmt.Errorf("fast path: %s: %s", at, num)
		}
		i, iok := ratInt64(r)
		if k == "minimum" {
			n.minimum, n.minInt, n.minIntOK = r, i, iok
		} else {
			n.maximum, n.maxInt, n.maxIntOK = r, i, iok
		}
	case "minLength", "maxLength", "minItems", "maxItems":
		num, ok := v.(json.Number)
		i, err := strconv.Atoi(string(num))
		if !ok || err != nil || i < 0 {
			return fmt.Errorf("fast path: %s: a count", at)
		}
		switch k {
		case "minLength":
			n.minLength = i
		case "maxLength":
			n.maxLength = i
		case "minItems":
			n.minItems = i
		default:
			n.maxItems = i
		}
	case "pattern":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("fast path: %s: pattern", at)
		}
		re, err := regexp.Compile(s)
		if err != nil {
			return fmt.Errorf("fast path: %s: %w", at, err)
		}
		n.pattern = re
	case "format":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("fast path: %s: format", at)
		}
		f, err := c.format(s)
		if err != nil {
			return err
		}
		n.format = f
	case "properties":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("fast path: %s: properties", at)
		}
		n.props = make(map[string]*fastNode, len(m))
		for name, sv := range m {
			sn, err := c.sub(sv, doc, at+"/"+name)
			if err != nil {
				return err
			}
			n.props[name] = sn
		}
	case "required":
		names, ok := stringsOf(v)
		if !ok {
			return fmt.Errorf("fast path: %s: required", at)
		}
		n.required = names
	case "additionalProperties":
		sn, err := c.sub(v, doc, at)
		if err != nil {
			return err
		}
		n.additional, n.hasAddl = sn, true
	case "items":
		sn, err := c.sub(v, doc, at)
		if err != nil {
			return err
		}
		n.items = sn
	case "prefixItems", "allOf", "anyOf", "oneOf":
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return fmt.Errorf("fast path: %s: a list of schemas", at)
		}
		var out []*fastNode
		for i, sv := range list {
			sn, err := c.sub(sv, doc, at+"/"+strconv.Itoa(i))
			if err != nil {
				return err
			}
			out = append(out, sn)
		}
		switch k {
		case "prefixItems":
			n.prefixItems = out
		case "allOf":
			n.allOf = out
		case "anyOf":
			n.anyOf = out
		default:
			n.oneOf = out
		}
	case "$ref":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("fast path: %s: $ref", at)
		}
		target := s
		if strings.HasPrefix(s, "#") {
			target = doc + s
		}
		rn, err := c.compile(target)
		if err != nil {
			return err
		}
		n.ref = rn
	default:
		return fmt.Errorf("fast path: %s: keyword %q is not compiled", at, k)
	}
	return nil
}

// format compiles {"format": name} with the general validator, so a
// format means on the fast path exactly what it means there.
func (c *fastCompiler) format(name string) (*jsonschema.Schema, error) {
	if f, ok := c.formats[name]; ok {
		return f, nil
	}
	jc := jsonschema.NewCompiler()
	jc.AssertFormat()
	url := "urn:lowbarena:format:" + name
	if err := jc.AddResource(url, map[string]any{"format": name}); err != nil {
		return nil, fmt.Errorf("fast path: format %s: %w", name, err)
	}
	f, err := jc.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("fast path: format %s: %w", name, err)
	}
	c.formats[name] = f
	return f, nil
}

func stringsOf(v any) ([]string, bool) {
	switch t := v.(type) {
	case string:
		return []string{t}, true
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// intersect keeps the strings both lists allow (const and enum together).
func intersect(have []string, had bool, more []string) []string {
	if !had {
		return more
	}
	var out []string
	for _, s := range have {
		for _, m := range more {
			if s == m {
				out = append(out, s)
				break
			}
		}
	}
	if out == nil {
		out = []string{}
	}
	return out
}

// ratInt64 is r as an int64 bound for cmpDecimal, which negates it:
// math.MinInt64 is left to exact arithmetic.
func ratInt64(r *big.Rat) (int64, bool) {
	if !r.IsInt() || !r.Num().IsInt64() || r.Num().Int64() == math.MinInt64 {
		return 0, false
	}
	return r.Num().Int64(), true
}

// fastScan walks one payload. undecided is set when the fast path meets
// something it leaves to the general validator.
type fastScan struct {
	data      []byte
	pos       int
	undecided bool
}

// fastValid reports whether the fast path accepts data as an instance of
// n; false means "ask the general validator", not "invalid".
func fastValid(n *fastNode, data []byte) bool {
	s := &fastScan{data: data}
	s.ws()
	ok := s.value(n)
	s.ws()
	return ok && !s.undecided && s.pos == len(s.data)
}

func (s *fastScan) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value checks the value at pos against n and moves past it. On false
// the scan stops: the payload goes to the general validator.
func (s *fastScan) value(n *fastNode) bool {
	if n != nil && n.never {
		return false
	}
	start := s.pos
	if n != nil {
		if n.ref != nil {
			if !s.value(n.ref) {
				return false
			}
			s.pos = start
		}
		for _, sub := range n.allOf {
			if !s.value(sub) {
				return false
			}
			s.pos = start
		}
		if len(n.anyOf) > 0 {
			matched := false
			for _, sub := range n.anyOf {
				s.pos = start
				if s.value(sub) && !s.undecided {
					matched = true
					break
				}
				if s.undecided {
					return false
				}
			}
			if !matched {
				return false
			}
			s.pos = start
		}
		if len(n.oneOf) > 0 {
			passed := 0
			for _, sub := range n.oneOf {
				s.pos = start
				if s.value(sub) {
					passed++
				}
				if s.undecided {
					return false
				}
			}
			if passed != 1 {
				return false
			}
			s.pos = start
		}
	}
	if s.pos >= len(s.data) {
		return false
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return s.object(n)
	case c == '[':
		return s.array(n)
	case c == '"':
		return s.str(n)
	case c == 't':
		return s.literal("true") && n.allows(tBool) && !n.enumOnly()
	case c == 'f':
		return s.literal("false") && n.allows(tBool) && !n.enumOnly()
	case c == 'n':
		return s.literal("null") && n.allows(tNull) && !n.enumOnly()
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(n)
	}
	return false
}

func (n *fastNode) allows(t uint8) bool {
	if n == nil || n.types == 0 {
		return true
	}
	if t == tInteger {
		return n.types&(tInteger|tNumber) != 0
	}
	return n.types&t != 0
}

// enumOnly: a string enum or const, which nothing but a string meets.
func (n *fastNode) enumOnly() bool { return n != nil && n.hasEnum }

func (s *fastScan) literal(lit string) bool {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(lit)) {
		return false
	}
	s.pos += len(lit)
	return true
}

func (s *fastScan) object(n *fastNode) bool {
	if !n.allows(tObject) || n.enumOnly() {
		return false
	}
	s.pos++ // {
	var buf [16][]byte
	seen := buf[:0]
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		return n == nil || len(n.required) == 0
	}
	for {
		s.ws()
		key, ok := s.key()
		if !ok {
			return false
		}
		for _, k := range seen {
			if bytes.Equal(k, key) {
				// A key twice: the general validator sees the last
				// value only; let it decide.
				s.undecided = true
				return false
			}
		}
		seen = append(seen, key)
		s.ws()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return false
		}
		s.pos++
		s.ws()
		var sub *fastNode
		if n != nil {
			if p, ok := n.props[string(key)]; ok {
				sub = p
			} else if n.hasAddl {
				sub = n.additional
				if sub == nil || sub.never {
					return false
				}
			}
		}
		if !s.value(sub) {
			return false
		}
		s.ws()
		if s.pos >= len(s.data) {
			return false
		}
		if s.data[s.pos] == ',' {
			s.pos++
			continue
		}
		if s.data[s.pos] != '}' {
			return false
		}
		s.pos++
		break
	}
	if n != nil {
		for _, r := range n.required {
			found := false
			for _, k := range seen {
				if string(k) == r {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
	}
	return true
}

func (s *fastScan) array(n *fastNode) bool {
	if !n.allows(tArray) || n.enumOnly() {
		return false
	}
	s.pos++ // [
	count := 0
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
	} else {
		for {
			s.ws()
			var sub *fastNode
			if n != nil {
				if count < len(n.prefixItems) {
					sub = n.prefixItems[count]
				} else {
					sub = n.items
				}
			}
			if !s.value(sub) {
				return false
			}
			count++
			s.ws()
			if s.pos >= len(s.data) {
				return false
			}
			if s.data[s.pos] == ',' {
				s.pos++
				continue
			}
			if s.data[s.pos] != ']' {
				return false
			}
			s.pos++
			break
		}
	}
	if n != nil && ((n.minItems >= 0 && count < n.minItems) || (n.maxItems >= 0 && count > n.maxItems)) {
		return false
	}
	return true
}

// rawString moves past the string at pos and returns its bytes between
// the quotes, and whether they hold an escape or a byte outside ASCII.
func (s *fastScan) rawString() (raw []byte, plain, ok bool) {
	s.pos++ // "
	start := s.pos
	plain = true
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			raw = s.data[start:s.pos]
			s.pos++
			return raw, plain, true
		case c < 0x20:
			return nil, false, false
		case c == '\\':
			plain = false
			if s.pos+1 >= len(s.data) {
				return nil, false, false
			}
			switch s.data[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if s.pos+6 > len(s.data) {
					return nil, false, false
				}
				for _, h := range s.data[s.pos+2 : s.pos+6] {
					if !isHex(h) {
						return nil, false, false
					}
				}
				s.pos += 6
			default:
				return nil, false, false
			}
		default:
			if c >= 0x80 {
				plain = false
			}
			s.pos++
		}
	}
	return nil, false, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// decoded is the string encoding/json would give for the raw bytes of a
// JSON string (escapes resolved, invalid UTF-8 replaced).
func decoded(raw []byte, plain bool) (string, bool) {
	if plain || (bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw)) {
		return string(raw), true
	}
	var out string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	if err := json.Unmarshal(q, &out); err != nil {
		return "", false
	}
	return out, true
}

// key reads an object's key: its bytes as they are when plain (no escape,
// ASCII only), else the bytes of its decoded string.
func (s *fastScan) key() ([]byte, bool) {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, false
	}
	raw, plain, ok := s.rawString()
	if !ok {
		return nil, false
	}
	if plain {
		return raw, true
	}
	d, ok := decoded(raw, plain)
	return []byte(d), ok
}

func (s *fastScan) str(n *fastNode) bool {
	if !n.allows(tString) {
		return false
	}
	raw, plain, ok := s.rawString()
	if !ok {
		return false
	}
	if n == nil || (!n.hasEnum && n.pattern == nil && n.format == nil && n.minLength < 0 && n.maxLength < 0) {
		return true
	}
	// A plain string (no escape, ASCII only) is its own bytes: checked
	// without a copy.
	var v []byte
	if plain {
		v = raw
	} else {
		d, ok := decoded(raw, plain)
		if !ok {
			return false
		}
		v = []byte(d)
	}
	if n.hasEnum {
		found := false
		for _, e := range n.strEnum {
			if string(v) == e {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if n.minLength >= 0 || n.maxLength >= 0 {
		l := utf8.RuneCount(v)
		if (n.minLength >= 0 && l < n.minLength) || (n.maxLength >= 0 && l > n.maxLength) {
			return false
		}
	}
	if n.pattern != nil && !n.pattern.Match(v) {
		return false
	}
	if n.format != nil && n.format.Validate(string(v)) != nil {
		return false
	}
	return true
}

func (s *fastScan) number(n *fastNode) bool {
	start := s.pos
	if s.data[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		d := 0
		for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
			s.pos++
			d++
		}
		return d
	}
	if s.pos >= len(s.data) {
		return false
	}
	if s.data[s.pos] == '0' {
		s.pos++
	} else if digits() == 0 {
		return false
	}
	integral, exponent, fracNonZero := true, false, false
	intEnd := s.pos
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		fracStart := s.pos
		if digits() == 0 {
			return false
		}
		integral = false
		for _, c := range s.data[fracStart:s.pos] {
			fracNonZero = fracNonZero || c != '0'
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return false
		}
		integral, exponent = false, true
	}
	if n.enumOnly() {
		return false
	}
	if n == nil || (n.types == 0 && n.minimum == nil && n.maximum == nil) {
		return true
	}
	numberOK := n.types == 0 || n.types&tNumber != 0
	integerOK := numberOK || n.types&tInteger != 0
	if !integerOK {
		return false
	}
	lit := s.data[start:s.pos]
	if !integral && numberOK && n.minimum == nil && n.maximum == nil {
		return true
	}
	// A literal without an exponent whose integer part fits an int64,
	// against bounds that are int64s: compared exactly in integers (the
	// fraction only matters by being zero or not). Anything else in
	// exact rational arithmetic, as the general validator does it.
	neg := lit[0] == '-'
	intDigits := s.data[start:intEnd]
	if neg {
		intDigits = intDigits[1:]
	}
	ip, err := strconv.ParseInt(string(intDigits), 10, 64)
	if !exponent && err == nil && (n.minimum == nil || n.minIntOK) && (n.maximum == nil || n.maxIntOK) {
		if !numberOK && fracNonZero {
			return false // not an integer
		}
		return (n.minimum == nil || cmpDecimal(neg, ip, fracNonZero, n.minInt) >= 0) &&
			(n.maximum == nil || cmpDecimal(neg, ip, fracNonZero, n.maxInt) <= 0)
	}
	r, ok := new(big.Rat).SetString(string(lit))
	if !ok {
		s.undecided = true
		return false
	}
	if !numberOK && !r.IsInt() {
		return false
	}
	return (n.minimum == nil || r.Cmp(n.minimum) >= 0) && (n.maximum == nil || r.Cmp(n.maximum) <= 0)
}

// cmpDecimal compares the decimal ±(ip + f), 0 <= f < 1 (f > 0 when
// fracNonZero), with the integer m: -1, 0 or +1, exactly.
func cmpDecimal(neg bool, ip int64, fracNonZero bool, m int64) int {
	// cmpPos compares w = ip + f >= 0 with the integer k.
	cmpPos := func(k int64) int {
		switch {
		case ip > k:
			return 1
		case ip < k:
			return -1 // ip <= k-1, so ip + f < k
		case fracNonZero:
			return 1
		}
		return 0
	}
	if !neg {
		return cmpPos(m)
	}
	// -w compared with m is the opposite of w compared with -m.
	return -cmpPos(-m)
}

// FastPathAgrees tells whether the fast path alone accepts data as an
// event of eventType, and returns an error when it accepts what the
// general validator refuses: the one disagreement that would change an
// outcome. Tests outside this package hold the fast path to their own
// payloads with it.
func (v *Validator) FastPathAgrees(eventType string, data []byte) (accepted bool, err error) {
	sch, ok := v.events[eventType]
	if !ok {
		return false, fmt.Errorf("%w %q", ErrUnknownType, eventType)
	}
	n := v.fastEvents[eventType]
	if n == nil || !fastValid(n, data) {
		return false, nil
	}
	if err := validate(sch, data); err != nil {
		return true, fmt.Errorf("the fast path accepted a %s the general validator refuses (%w): %s", eventType, err, data)
	}
	return true, nil
}
