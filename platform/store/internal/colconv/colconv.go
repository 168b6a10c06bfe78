// Package colconv converts the values given to store.Store.Append to the Go
// type of their column, the same way in every adapter, so that a value that
// does not fit its column is refused by both back-ends alike (chDB would
// otherwise wrap an overflowing integer, store a number as text and a nil as
// the default, where clickhouse-go refuses or wraps differently).
package colconv

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"
)

// ErrNil is returned by Convert for a nil value for a column that is not
// Nullable.
var ErrNil = errors.New("nil value for a column that is not Nullable")

// Convert returns v as the Go type clickhouse-go takes for a column of type
// typ, for the scalar types of the arena's DDL, following the rules of
// store.Store.Append and store.Bind: integers of any width into integer
// columns when they fit, floats and integers into float columns, bools as 1 or 0,
// time.Time as unix milliseconds into UInt64 and Int64, named types by their
// kind. A value of another kind is an error, and so is nil. Values for
// columns of other types (Nullable, Array, ...) pass through unchanged, for
// the engine to take or refuse.
func Convert(typ string, v any) (any, error) {
	switch typ {
	case "String", "Float64", "Float32", "UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64":
		if v == nil {
			return nil, ErrNil
		}
	}
	switch typ {
	case "String":
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return x, nil
		}
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
			return rv.String(), nil
		}
	case "Float64", "Float32":
		var f float64
		switch x := v.(type) {
		case float64:
			f = x
		case float32:
			f = float64(x)
		default:
			rv := reflect.ValueOf(v)
			switch rv.Kind() {
			case reflect.Float32, reflect.Float64:
				f = rv.Float()
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				f = float64(rv.Int())
			case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
				f = float64(rv.Uint())
			default:
				return nil, fmt.Errorf("a %T is not a float", v)
			}
		}
		if typ == "Float32" {
			return float32(f), nil
		}
		return f, nil
	case "UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64":
		return convertInt(typ, v)
	default:
		return v, nil
	}
	return nil, fmt.Errorf("a %T is not a string", v)
}

// convertInt converts an integer, bool or time.Time to the Go type of an
// integer column, refusing values out of its range.
func convertInt(typ string, v any) (any, error) {
	var (
		neg bool
		mag uint64 // the absolute value
	)
	switch x := v.(type) {
	case uint64:
		mag = x
	case uint32:
		mag = uint64(x)
	case uint8:
		mag = uint64(x)
	case int:
		neg, mag = x < 0, absInt(int64(x))
	case int64:
		neg, mag = x < 0, absInt(x)
	case bool:
		if x {
			mag = 1
		}
	case time.Time:
		ms := x.UnixMilli()
		if ms < 0 {
			return nil, fmt.Errorf("time %s is before 1970", x.Format(time.RFC3339))
		}
		mag = uint64(ms)
	default:
		rv := reflect.ValueOf(v)
		switch rv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			neg, mag = rv.Int() < 0, absInt(rv.Int())
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			mag = rv.Uint()
		case reflect.Bool:
			if rv.Bool() {
				mag = 1
			}
		default:
			return nil, fmt.Errorf("a %T is not an integer", v)
		}
	}
	bits, unsigned := intType(typ)
	if unsigned {
		if neg {
			return nil, fmt.Errorf("%v is negative", v)
		}
		if bits < 64 && mag > 1<<bits-1 {
			return nil, fmt.Errorf("%v overflows %s", v, typ)
		}
		switch bits {
		case 8:
			return uint8(mag), nil
		case 16:
			return uint16(mag), nil
		case 32:
			return uint32(mag), nil
		}
		return mag, nil
	}
	limit := uint64(1) << (bits - 1) // |min|; max is limit-1
	if (!neg && mag > limit-1) || (neg && mag > limit) {
		return nil, fmt.Errorf("%v overflows %s", v, typ)
	}
	var n int64
	if neg {
		n = int64(-mag) // two's complement; exact for mag <= 1<<63
	} else {
		n = int64(mag)
	}
	switch bits {
	case 8:
		return int8(n), nil
	case 16:
		return int16(n), nil
	case 32:
		return int32(n), nil
	}
	return n, nil
}

// intType returns the width of an integer column type and whether it is
// unsigned.
func intType(typ string) (bits int, unsigned bool) {
	switch typ {
	case "UInt8":
		return 8, true
	case "UInt16":
		return 16, true
	case "UInt32":
		return 32, true
	case "UInt64":
		return 64, true
	case "Int8":
		return 8, false
	case "Int16":
		return 16, false
	case "Int32":
		return 32, false
	}
	return 64, false
}

func absInt(x int64) uint64 {
	if x < 0 {
		if x == math.MinInt64 {
			return 1 << 63
		}
		return uint64(-x)
	}
	return uint64(x)
}

// Exact reports whether col, a typed column of store.Columns, holds the
// Go type a column of ClickHouse type typ takes as it is ([]uint64 for
// UInt64, []uint32 for UInt32, []uint8 for UInt8, []float64 for Float64,
// []string for String): then it needs no conversion, and every value fits.
func Exact(typ string, col any) bool {
	switch col.(type) {
	case []uint64:
		return typ == "UInt64"
	case []uint32:
		return typ == "UInt32"
	case []uint8:
		return typ == "UInt8"
	case []float64:
		return typ == "Float64"
	case []string:
		return typ == "String"
	}
	return false
}
