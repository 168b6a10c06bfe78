package store

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// ErrBind is wrapped by every error Bind returns.
var ErrBind = errors.New("store: bind")

// Bind replaces each ? placeholder in query with the SQL literal of the next
// argument and returns the statement to send. Both adapters bind on the
// client with it, so the engines receive plain SQL and the same query text
// works on chDB and on a ClickHouse server as old as 18.16, which has no
// server-side parameters.
//
// A placeholder is a ? outside single-quoted string literals, double-quoted
// and back-quoted identifiers and comments (-- to the end of the line and
// /* */). ClickHouse's ternary operator (c ? a : b) cannot be used through
// Bind; write if(c, a, b).
//
// Values become literals as follows:
//
//	string, []byte            'text', with \ ' and control characters escaped
//	int*, uint*               the decimal number
//	float32, float64          the shortest decimal that reads back the same
//	                          value, always with a '.' or an exponent, so it
//	                          is typed Float64; NaN and ±Inf are an error
//	bool                      1 or 0 (UInt8, as the DDL stores flags)
//	time.Time                 unix milliseconds (UInt64, as the ts_ms columns);
//	                          a time before 1970 is an error
//	nil                       NULL
//	a slice of the above      an array literal [a, b, c], usable with IN and has()
//
// Named types are bound by their kind (a `type Stage string` is a string).
// Any other type is an error, as is a count of arguments that differs from
// the count of placeholders.
func Bind(query string, args ...any) (string, error) {
	var (
		b     strings.Builder
		next  int // index of the next argument to bind
		start int // start of the text not yet copied to b
	)
	// Invariant: query[start:i] is copied verbatim; only a placeholder
	// outside quotes and comments is ever replaced.
	for i := 0; i < len(query); i++ {
		switch c := query[i]; c {
		case '\'', '"', '`':
			i = skipQuoted(query, i, c)
		case '-':
			if i+1 < len(query) && query[i+1] == '-' {
				if j := strings.IndexByte(query[i:], '\n'); j >= 0 {
					i += j
				} else {
					i = len(query)
				}
			}
		case '/':
			if i+1 < len(query) && query[i+1] == '*' {
				if j := strings.Index(query[i+2:], "*/"); j >= 0 {
					i += j + 3
				} else {
					i = len(query)
				}
			}
		case '?':
			if next >= len(args) {
				return "", fmt.Errorf("%w: query has more placeholders than the %d arguments given", ErrBind, len(args))
			}
			if b.Len() == 0 {
				b.Grow(len(query) + 16*len(args))
			}
			b.WriteString(query[start:i])
			if err := appendLiteral(&b, args[next]); err != nil {
				return "", fmt.Errorf("%w: argument %d: %w", ErrBind, next+1, err)
			}
			next++
			start = i + 1
		}
	}
	if next != len(args) {
		return "", fmt.Errorf("%w: query has %d placeholders, got %d arguments", ErrBind, next, len(args))
	}
	if next == 0 {
		return query, nil
	}
	b.WriteString(query[start:])
	return b.String(), nil
}

// skipQuoted returns the index of the quote that closes the literal or
// identifier opened by q at query[i], or len(query) when it is not closed.
// ClickHouse escapes a quote inside quotes both with a backslash and by
// doubling it; a doubled quote reads as a close followed by an open, which
// lands in the same place.
func skipQuoted(query string, i int, q byte) int {
	for j := i + 1; j < len(query); j++ {
		switch query[j] {
		case '\\':
			j++
		case q:
			return j
		}
	}
	return len(query)
}

var timeType = reflect.TypeOf(time.Time{})

// appendLiteral writes the SQL literal of v.
func appendLiteral(b *strings.Builder, v any) error {
	// Fast paths for the common types; the reflect path below handles named
	// types and slices.
	switch x := v.(type) {
	case nil:
		b.WriteString("NULL")
		return nil
	case string:
		quoteString(b, x)
		return nil
	case []byte:
		quoteString(b, string(x))
		return nil
	case int:
		b.WriteString(strconv.Itoa(x))
		return nil
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
		return nil
	case uint64:
		b.WriteString(strconv.FormatUint(x, 10))
		return nil
	case float64:
		return appendFloat(b, x, 64)
	case bool:
		if x {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
		return nil
	case time.Time:
		return appendTime(b, x)
	}
	return appendValue(b, reflect.ValueOf(v), true)
}

// appendValue writes the literal of a scalar, or of a slice of scalars when
// top is true (arrays of arrays are not bound).
func appendValue(b *strings.Builder, v reflect.Value, top bool) error {
	if v.Kind() == reflect.Interface { // an element of a []any
		if v.IsNil() {
			b.WriteString("NULL")
			return nil
		}
		v = v.Elem()
	}
	if v.Type() == timeType {
		return appendTime(b, v.Interface().(time.Time))
	}
	switch v.Kind() {
	case reflect.String:
		quoteString(b, v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32:
		return appendFloat(b, v.Float(), 32)
	case reflect.Float64:
		return appendFloat(b, v.Float(), 64)
	case reflect.Bool:
		if v.Bool() {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	case reflect.Slice, reflect.Array:
		if !top {
			return fmt.Errorf("nested arrays (%s) are not bound", v.Type())
		}
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			quoteString(b, string(v.Bytes()))
			return nil
		}
		b.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := appendValue(b, v.Index(i), false); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		b.WriteByte(']')
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// appendFloat writes a finite float so that it reads back as the same
// Float64 (or the same Float32 for bits == 32).
func appendFloat(b *strings.Builder, f float64, bits int) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("%v has no SQL literal", f)
	}
	s := strconv.FormatFloat(f, 'g', -1, bits)
	b.WriteString(s)
	if !strings.ContainsAny(s, ".e") {
		b.WriteString(".0") // 3 would be typed UInt8; 3.0 is Float64
	}
	return nil
}

// appendTime writes t as unix milliseconds.
func appendTime(b *strings.Builder, t time.Time) error {
	ms := t.UnixMilli()
	if ms < 0 {
		return fmt.Errorf("time %s is before 1970 and has no UInt64 unix milliseconds", t.Format(time.RFC3339))
	}
	b.WriteString(strconv.FormatInt(ms, 10))
	return nil
}

// quoteString writes s as a ClickHouse single-quoted string literal. The
// backslash and the quote are escaped with a backslash, and so are NUL and
// the other ASCII control characters (chDB receives its query as a C string,
// where a raw NUL would end it). Every other byte, valid UTF-8 or not, is
// written as it is, and ClickHouse stores it as it is.
func quoteString(b *strings.Builder, s string) {
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var esc string
		switch {
		case c == '\\':
			esc = `\\`
		case c == '\'':
			esc = `\'`
		case c == 0:
			esc = `\0`
		case c == '\n':
			esc = `\n`
		case c == '\r':
			esc = `\r`
		case c == '\t':
			esc = `\t`
		case c < 0x20 || c == 0x7f:
			esc = `\x` + string(hexDigit[c>>4]) + string(hexDigit[c&0xf])
		default:
			continue
		}
		b.WriteString(s[start:i])
		b.WriteString(esc)
		start = i + 1
	}
	b.WriteString(s[start:])
	b.WriteByte('\'')
}

const hexDigit = "0123456789abcdef"
