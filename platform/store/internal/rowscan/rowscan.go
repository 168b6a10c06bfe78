// Package rowscan fills Select's destination, a pointer to a slice of
// structs with `ch:"column"` tags, for the adapters of package store.
package rowscan

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"

	"github.com/lowbarena/lowbarena/platform/store"
)

// ErrDest is wrapped by the errors about a destination that Select cannot
// fill.
var ErrDest = errors.New("store: bad Select destination")

// Dest collects decoded rows for one Select. It is not safe for concurrent
// use.
type Dest struct {
	ptr    reflect.Value // the *[]T given to Select
	rows   reflect.Value // the []T being built
	elem   reflect.Type  // T, a struct type
	fields map[string]int
}

// New checks that dest is a non-nil pointer to a slice of structs.
func New(dest any) (*Dest, error) {
	v := reflect.ValueOf(dest)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, fmt.Errorf("%w: want a non-nil pointer to a slice of structs, got %T", ErrDest, dest)
	}
	s := v.Elem()
	if s.Kind() != reflect.Slice || s.Type().Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: want a pointer to a slice of structs, got %T", ErrDest, dest)
	}
	elem := s.Type().Elem()
	// rows is addressable (the element of a new pointer), so Grow can
	// extend it in place.
	rows := reflect.New(s.Type()).Elem()
	rows.Set(reflect.MakeSlice(s.Type(), 0, 0))
	return &Dest{
		ptr:    v,
		rows:   rows,
		elem:   elem,
		fields: store.FieldsByColumn(elem),
	}, nil
}

// Plan returns, for each result column, the index of the struct field that
// takes it, or -1 when no field has that column's tag.
func (d *Dest) Plan(columns []string) []int {
	plan := make([]int, len(columns))
	for i, c := range columns {
		if fi, ok := d.fields[c]; ok {
			plan[i] = fi
		} else {
			plan[i] = -1
		}
	}
	return plan
}

// Grow reserves room for n more rows.
func (d *Dest) Grow(n int) {
	if n > 0 {
		d.rows.Grow(n)
	}
}

// Next appends a zero row and returns it, addressable, for the caller to
// fill its fields.
func (d *Dest) Next() reflect.Value {
	n := d.rows.Len()
	if n == d.rows.Cap() {
		d.rows.Grow(1)
	}
	d.rows.SetLen(n + 1) // the new element is zero: Grow zeroes new capacity
	return d.rows.Index(n)
}

// Finish stores the rows in the destination, replacing what it held. It is
// called only after every row decoded, so a failed Select leaves the
// destination untouched.
func (d *Dest) Finish() {
	d.ptr.Elem().Set(d.rows)
}

// Set assigns a value scanned from an engine to a struct field, converting
// between the kinds a column and a field may disagree on: any integer or
// float into any integer or float field when the value fits, 0/1 integers
// into bool fields, bools into integer fields, strings into strings, slices
// element by element. A nil value or nil pointer (a NULL) leaves the zero.
func Set(f reflect.Value, v any) error {
	if v == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	return setValue(f, rv)
}

func setValue(f, v reflect.Value) error { //nolint:gocyclo // a table of cases: each column type the engines return against each field kind it may fill
	if v.Type() == f.Type() {
		f.Set(v)
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		switch {
		case v.Kind() == reflect.String:
			f.SetString(v.String())
			return nil
		case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8:
			f.SetString(string(v.Bytes()))
			return nil
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var n int64
		switch v.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n = v.Int()
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			u := v.Uint()
			if u > math.MaxInt64 {
				return fmt.Errorf("%d overflows %s", u, f.Type())
			}
			n = int64(u)
		case reflect.Bool:
			if v.Bool() {
				n = 1
			}
		case reflect.Float32, reflect.Float64:
			x := v.Float()
			if x != math.Trunc(x) || x < math.MinInt64 || x >= math.MaxInt64 {
				return fmt.Errorf("%v does not fit %s", x, f.Type())
			}
			n = int64(x)
		default:
			return mismatch(f, v)
		}
		if f.OverflowInt(n) {
			return fmt.Errorf("%d overflows %s", n, f.Type())
		}
		f.SetInt(n)
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		var n uint64
		switch v.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n = v.Uint()
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			i := v.Int()
			if i < 0 {
				return fmt.Errorf("%d does not fit %s", i, f.Type())
			}
			n = uint64(i)
		case reflect.Bool:
			if v.Bool() {
				n = 1
			}
		case reflect.Float32, reflect.Float64:
			x := v.Float()
			if x != math.Trunc(x) || x < 0 || x >= math.MaxUint64 {
				return fmt.Errorf("%v does not fit %s", x, f.Type())
			}
			n = uint64(x)
		default:
			return mismatch(f, v)
		}
		if f.OverflowUint(n) {
			return fmt.Errorf("%d overflows %s", n, f.Type())
		}
		f.SetUint(n)
		return nil
	case reflect.Float32, reflect.Float64:
		var x float64
		switch v.Kind() {
		case reflect.Float32, reflect.Float64:
			x = v.Float()
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			x = float64(v.Int())
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			x = float64(v.Uint())
		default:
			return mismatch(f, v)
		}
		f.SetFloat(x)
		return nil
	case reflect.Bool:
		switch v.Kind() {
		case reflect.Bool:
			f.SetBool(v.Bool())
			return nil
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return setBool(f, v.Int() != 0, v.Int() == 0 || v.Int() == 1, v)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return setBool(f, v.Uint() != 0, v.Uint() <= 1, v)
		}
	case reflect.Slice:
		if v.Kind() == reflect.Slice || v.Kind() == reflect.Array {
			out := reflect.MakeSlice(f.Type(), v.Len(), v.Len())
			for i := 0; i < v.Len(); i++ {
				if err := Set(out.Index(i), v.Index(i).Interface()); err != nil {
					return fmt.Errorf("element %d: %w", i, err)
				}
			}
			f.Set(out)
			return nil
		}
	case reflect.Struct:
		if f.Type() == reflect.TypeOf(time.Time{}) && v.Type() == f.Type() {
			f.Set(v)
			return nil
		}
	}
	if v.Type().ConvertibleTo(f.Type()) && v.Kind() == f.Kind() {
		f.Set(v.Convert(f.Type()))
		return nil
	}
	return mismatch(f, v)
}

func setBool(f reflect.Value, b, ok bool, v reflect.Value) error {
	if !ok {
		return fmt.Errorf("%v is not a bool (want 0 or 1)", v)
	}
	f.SetBool(b)
	return nil
}

func mismatch(f, v reflect.Value) error {
	return fmt.Errorf("cannot put a %s into a %s field", v.Type(), f.Type())
}

// ParseInto assigns the text of a number, as an engine prints it, to a
// numeric or bool field: chDB's JSON output quotes 64-bit integers unless
// told otherwise, and prints NaN and infinities as "nan", "inf", "-inf".
func ParseInto(f reflect.Value, text string) error {
	switch f.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			if x, ferr := strconv.ParseFloat(text, 64); ferr == nil {
				return setValue(f, reflect.ValueOf(x)) // 3.0 into an int field
			}
			return fmt.Errorf("%q into %s: %w", text, f.Type(), err)
		}
		if f.OverflowInt(n) {
			return fmt.Errorf("%d overflows %s", n, f.Type())
		}
		f.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			if x, ferr := strconv.ParseFloat(text, 64); ferr == nil {
				return setValue(f, reflect.ValueOf(x))
			}
			return fmt.Errorf("%q into %s: %w", text, f.Type(), err)
		}
		if f.OverflowUint(n) {
			return fmt.Errorf("%d overflows %s", n, f.Type())
		}
		f.SetUint(n)
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return fmt.Errorf("%q into %s: %w", text, f.Type(), err)
		}
		f.SetFloat(x)
	case reflect.Bool:
		switch text {
		case "1", "true":
			f.SetBool(true)
		case "0", "false":
			f.SetBool(false)
		default:
			return fmt.Errorf("%q is not a bool (want 0 or 1)", text)
		}
	default:
		// Strings included: a number is not put into a string field, as
		// Set does not, so both adapters refuse the same destinations.
		return fmt.Errorf("cannot put the number %s into a %s field", text, f.Type())
	}
	return nil
}
