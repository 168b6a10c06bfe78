package loadgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// chunk is what the load generator reads of one streamed event: each
// choice's text (a completion's text, or a chat delta's content) and
// finish_reason, and the usage when the event carries it.
type chunk struct {
	// texts are the choices' texts, each the bytes of the event (valid
	// until the next read) unless it held an escape; finishes their
	// finish_reason ("" for null or none).
	texts    [][]byte
	finishes []string
	hasUsage bool
	// The usage's counts.
	promptTokens, completionTokens int
}

// errSyntax is the cause of a chunk that is not the JSON of an event.
var errSyntax = errors.New("not valid JSON")

// parseChunk reads one event's JSON into c (reset first), in one pass over
// the bytes, without reflection: the fields the load generator needs are
// read, every other value is checked and skipped. Anything that is not a
// JSON object, or a field of the wrong type, is an error: the caller's
// engine_bad_stream. Keys match as encoding/json matches them (without
// regard to case; a key twice, its last value), and the texts read are
// encoding/json's (TestParseChunkReadsWhatEncodingJSONReads,
// FuzzParseChunk).
func parseChunk(data []byte, c *chunk) error {
	c.texts, c.finishes, c.hasUsage, c.promptTokens, c.completionTokens = c.texts[:0], c.finishes[:0], false, 0, 0
	p := &jsonReader{data: data}
	err := p.object(func(key []byte) error {
		switch {
		case keyIs(key, "choices"):
			// A key given twice counts once, its last value (as
			// encoding/json reads it).
			c.texts, c.finishes = c.texts[:0], c.finishes[:0]
			if p.null() {
				return nil
			}
			return p.array(func() error { return p.choice(c) })
		case keyIs(key, "usage"):
			if p.null() {
				c.hasUsage = false
				return nil
			}
			c.hasUsage = true
			return p.object(func(key []byte) error {
				switch {
				case keyIs(key, "prompt_tokens"):
					n, err := p.integer()
					c.promptTokens = n
					return err
				case keyIs(key, "completion_tokens"):
					n, err := p.integer()
					c.completionTokens = n
					return err
				}
				return p.skip()
			})
		}
		return p.skip()
	})
	if err != nil {
		return err
	}
	p.ws()
	if p.pos != len(p.data) {
		return fmt.Errorf("%w: more after the event's end", errSyntax)
	}
	return nil
}

// choice reads one element of choices: text, delta.content, finish_reason.
func (p *jsonReader) choice(c *chunk) error {
	var text, content []byte
	finish := ""
	err := p.object(func(key []byte) error {
		switch {
		case keyIs(key, "text"):
			return p.keepString(&text)
		case keyIs(key, "finish_reason"):
			if p.null() {
				finish = ""
				return nil
			}
			var f []byte
			err := p.keepString(&f)
			finish = string(f)
			return err
		case keyIs(key, "delta"):
			if p.null() {
				return nil
			}
			return p.object(func(key []byte) error {
				if keyIs(key, "content") {
					return p.keepString(&content)
				}
				return p.skip()
			})
		}
		return p.skip()
	})
	if err != nil {
		return err
	}
	switch {
	case len(content) == 0:
	case len(text) == 0:
		text = content
	default:
		text = append(append([]byte(nil), text...), content...)
	}
	c.texts = append(c.texts, text)
	c.finishes = append(c.finishes, finish)
	return nil
}

// jsonReader reads JSON values from data, checking the syntax of
// everything it passes.
type jsonReader struct {
	data []byte
	pos  int
}

func (p *jsonReader) ws() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonReader) peek() byte {
	p.ws()
	if p.pos < len(p.data) {
		return p.data[p.pos]
	}
	return 0
}

func (p *jsonReader) expect(c byte) error {
	if p.peek() != c {
		return fmt.Errorf("%w: want %q at byte %d", errSyntax, c, p.pos)
	}
	p.pos++
	return nil
}

// null consumes a null and reports whether there was one.
func (p *jsonReader) null() bool {
	if p.peek() == 'n' && bytes.HasPrefix(p.data[p.pos:], []byte("null")) {
		p.pos += 4
		return true
	}
	return false
}

// object reads an object, calling field with each key positioned at its
// value, which field must consume.
func (p *jsonReader) object(field func(key []byte) error) error {
	if err := p.expect('{'); err != nil {
		return err
	}
	if p.peek() == '}' {
		p.pos++
		return nil
	}
	for {
		if p.peek() != '"' {
			return fmt.Errorf("%w: want a key at byte %d", errSyntax, p.pos)
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return nil
		default:
			return fmt.Errorf("%w: want ',' or '}' at byte %d", errSyntax, p.pos)
		}
	}
}

// array reads an array, calling elem positioned at each element.
func (p *jsonReader) array(elem func() error) error {
	if err := p.expect('['); err != nil {
		return err
	}
	if p.peek() == ']' {
		p.pos++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return nil
		default:
			return fmt.Errorf("%w: want ',' or ']' at byte %d", errSyntax, p.pos)
		}
	}
}

// keepString reads a string into *dst, or a null, which leaves *dst as it
// is (as encoding/json leaves a string field).
func (p *jsonReader) keepString(dst *[]byte) error {
	if p.null() {
		return nil
	}
	if p.peek() != '"' {
		return fmt.Errorf("%w: want a string at byte %d", errSyntax, p.pos)
	}
	s, err := p.str()
	if err == nil {
		*dst = s
	}
	return err
}

// keyIs matches a key to a field's name as encoding/json does: exactly,
// or without regard to case.
func keyIs(key []byte, name string) bool {
	return string(key) == name || strings.EqualFold(string(key), name)
}

// str reads the string at pos: its bytes as they are when it holds no
// escape and is valid UTF-8, else decoded as encoding/json decodes them
// (escapes resolved, invalid UTF-8 replaced).
func (p *jsonReader) str() ([]byte, error) {
	p.pos++ // the opening quote
	start, escaped, nonASCII := p.pos, false, false
	for p.pos < len(p.data) {
		switch c := p.data[p.pos]; {
		case c == '"':
			raw := p.data[start:p.pos]
			p.pos++
			if !escaped && (!nonASCII || utf8.Valid(raw)) {
				return raw, nil
			}
			var s string
			if err := json.Unmarshal(p.data[start-1:p.pos], &s); err != nil {
				return nil, fmt.Errorf("%w: %w", errSyntax, err)
			}
			return []byte(s), nil
		case c == '\\':
			escaped = true
			p.pos += 2
		case c < 0x20:
			return nil, fmt.Errorf("%w: a control character in a string at byte %d", errSyntax, p.pos)
		default:
			nonASCII = nonASCII || c >= 0x80
			p.pos++
		}
	}
	return nil, fmt.Errorf("%w: a string does not end", errSyntax)
}

// number reads a number's literal, checking its grammar.
func (p *jsonReader) number() ([]byte, error) {
	p.ws()
	start := p.pos
	if p.pos < len(p.data) && p.data[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case digits() == 0:
		return nil, fmt.Errorf("%w: want a number at byte %d", errSyntax, start)
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, fmt.Errorf("%w: a number without digits after its point at byte %d", errSyntax, start)
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, fmt.Errorf("%w: a number without digits in its exponent at byte %d", errSyntax, start)
		}
	}
	return p.data[start:p.pos], nil
}

// integer reads a number that is an int (a count).
func (p *jsonReader) integer() (int, error) {
	lit, err := p.number()
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(string(lit))
	if err != nil {
		return 0, fmt.Errorf("%w: %s is not a count", errSyntax, lit)
	}
	return n, nil
}

// skip checks and passes the value at pos.
func (p *jsonReader) skip() error {
	switch c := p.peek(); {
	case c == '{':
		return p.object(func([]byte) error { return p.skip() })
	case c == '[':
		return p.array(p.skip)
	case c == '"':
		_, err := p.str()
		return err
	case c == 't' && bytes.HasPrefix(p.data[p.pos:], []byte("true")):
		p.pos += 4
	case c == 'f' && bytes.HasPrefix(p.data[p.pos:], []byte("false")):
		p.pos += 5
	case p.null():
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := p.number()
		return err
	default:
		return fmt.Errorf("%w: no value at byte %d", errSyntax, p.pos)
	}
	return nil
}
