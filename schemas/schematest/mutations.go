// Package schematest holds what tests of validators share: payloads
// mutated every way a schema can refuse them.
package schematest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Mutations returns a JSON payload and mutations of it, to hold a
// validator to another: every property removed, every value replaced by
// values of each JSON type and by edge values (1.0, 1e2, -0, an integer
// past int64, escapes, a lone surrogate, a date out of range), an extra
// property, a key twice (the last value bad or good), and the bytes cut
// short or followed by more; the same three levels down.
func Mutations(t testing.TB, example []byte) [][]byte { return mutations(t, example, 3) }

func mutations(t testing.TB, example []byte, depth int) [][]byte {
	var obj map[string]json.RawMessage
	out := [][]byte{example}
	if json.Unmarshal(example, &obj) != nil {
		return out
	}
	replacements := []string{`null`, `true`, `0`, `-1`, `1`, `1.0`, `1.5`, `1e2`, `-0`, `9223372036854775808`, `""`, `"x"`,
		`"b0c4e95f426f48e2"`, `"2026-10-13T05:46:19Z"`, `"2026-13-45T99:99:99Z"`, `"é\u00e9\ud800"`, `[]`, `[1]`, `{}`, `{"a":1}`}
	enc := func(m map[string]json.RawMessage) []byte {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	for k, v := range obj {
		without := map[string]json.RawMessage{}
		for k2, v2 := range obj {
			if k2 != k {
				without[k2] = v2
			}
		}
		out = append(out, enc(without))
		for _, r := range replacements {
			with := map[string]json.RawMessage{}
			for k2, v2 := range obj {
				with[k2] = v2
			}
			with[k] = json.RawMessage(r)
			out = append(out, enc(with))
		}
		// The same key twice, the last value bad or good.
		out = append(out, []byte(`{"`+k+`":`+string(v)+`,`+strings.TrimPrefix(string(enc(obj)), "{")))
		out = append(out, []byte(strings.TrimSuffix(string(enc(obj)), "}")+`,"`+k+`":null}`))
		// Nested payloads: mutate a few levels down too.
		if depth == 0 {
			continue
		}
		for _, inner := range mutations(t, v, depth-1)[1:] {
			if !json.Valid(inner) {
				continue
			}
			with := map[string]json.RawMessage{}
			for k2, v2 := range obj {
				with[k2] = v2
			}
			with[k] = inner
			out = append(out, enc(with))
		}
	}
	extra := map[string]json.RawMessage{"zz_extra": json.RawMessage(`1`)}
	for k, v := range obj {
		extra[k] = v
	}
	out = append(out, enc(extra), example[:len(example)/2], append(append([]byte{}, example...), '}'), []byte(" "+string(example)+"\n"))
	return out
}
