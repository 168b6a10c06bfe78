package schemas

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/schemas/schematest"
)

// fastDocs reads the embedded schema documents as NewValidator does.
func fastDocs(t testing.TB) map[string]any {
	docs := map[string]any{}
	require.NoError(t, fs.WalkDir(jsonFS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := jsonFS.ReadFile(p)
		require.NoError(t, err)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		require.NoError(t, err)
		docs[Base+p] = doc
		return nil
	}))
	return docs
}

// TestFastPathCoversEverySchema: every embedded schema compiles on the
// fast path, so no payload pays for the general validator when it is
// valid. A schema that uses a keyword the fast path does not compile fails
// here with the keyword's location; teach fast.go the keyword.
func TestFastPathCoversEverySchema(t *testing.T) {
	docs := fastDocs(t)
	c := newFastCompiler(docs)
	for url := range docs {
		t.Run(strings.TrimPrefix(url, Base), func(t *testing.T) {
			_, err := c.compile(url)
			require.NoError(t, err)
		})
	}
	v, err := NewValidator()
	require.NoError(t, err)
	require.Len(t, v.fastEvents, len(v.events))
	require.NotNil(t, v.fastRecord)
}

// TestFastPathRefusesWhatItDoesNotCompile: a keyword outside the compiled
// set, a non-string enum and a $id inside a schema each leave the schema
// to the general validator.
func TestFastPathRefusesWhatItDoesNotCompile(t *testing.T) {
	cases := []struct {
		name, schema, want string
	}{
		{"not", `{"not": {"type": "string"}}`, `keyword "not"`},
		{"uniqueItems", `{"type": "array", "uniqueItems": true}`, `keyword "uniqueItems"`},
		{"an enum of numbers", `{"enum": [1, 2]}`, "only enums of strings"},
		{"a const object", `{"const": {"a": 1}}`, "only string consts"},
		{"an inner $id", `{"properties": {"a": {"$id": "https://x/y.json"}}}`, "$id inside a schema"},
		{"a dangling $ref", `{"$ref": "#/$defs/nothing"}`, "does not resolve"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.schema))
			require.NoError(t, err)
			_, err = newFastCompiler(map[string]any{"urn:t": doc}).compile("urn:t")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestFastPathAgreesWithTheLibrary: for every event type with an example
// in its schema, the example and hundreds of mutations of it, the fast
// path accepts only what the general validator accepts, and accepts the
// examples themselves (it is of no use otherwise). The catalogue's tests
// (events.TestFastPathOnEverySample) do the same for every type's sample.
func TestFastPathAgreesWithTheLibrary(t *testing.T) {
	v, err := NewValidator()
	require.NoError(t, err)
	checked, accepted := 0, 0
	for typ, sch := range v.events {
		example, ok := Example(typ)
		if !ok {
			continue
		}
		require.True(t, fastValid(v.fastEvents[typ], example), "%s: the fast path accepts the schema's own example", typ)
		for _, p := range schematest.Mutations(t, example) {
			lib := validate(sch, p) == nil
			fast := fastValid(v.fastEvents[typ], p)
			require.False(t, fast && !lib, "%s: the fast path accepted what the library refuses: %s", typ, p)
			checked++
			if fast {
				accepted++
			}
		}
	}
	require.Positive(t, checked)
	require.Positive(t, accepted)
	t.Logf("%d payloads, %d accepted by the fast path", checked, accepted)
}

// TestFastPathOnRecords: the fixtures' records pass on the fast path, and
// mutations of them are accepted only when the library accepts them.
func TestFastPathOnRecords(t *testing.T) {
	v, err := NewValidator()
	require.NoError(t, err)
	for _, name := range []string{"submission_qwen3-8b_b0c4e95f426f48e2.json", "submission_qwen35-27b_4632bca02a3846d5.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", "lowbarena", name))
		require.NoError(t, err)
		require.True(t, fastValid(v.fastRecord, raw), name)
		for _, p := range schematest.Mutations(t, raw) {
			lib := validate(v.record, p) == nil
			require.False(t, fastValid(v.fastRecord, p) && !lib, "accepted what the library refuses: %.300s", p)
		}
	}
}

// FuzzFastPathNeverAcceptsMore: whatever the bytes, the fast path accepts
// a payload of a type only when the general validator does.
func FuzzFastPathNeverAcceptsMore(f *testing.F) {
	v, err := NewValidator()
	require.NoError(f, err)
	var types []string
	for typ := range v.events {
		types = append(types, typ)
		if ex, ok := Example(typ); ok {
			f.Add(uint8(len(types)-1), []byte(ex))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		typ := types[int(which)%len(types)]
		if fastValid(v.fastEvents[typ], data) {
			require.NoError(t, validate(v.events[typ], data), "%s: %q", typ, data)
		}
	})
}

// TestFastPathNumbers: numbers against integer and number types and
// bounds, every literal form JSON has, decided as the general validator
// decides them (or left to it).
func TestFastPathNumbers(t *testing.T) {
	schemasByName := map[string]string{
		"integer in [-3, 5]":    `{"type": "integer", "minimum": -3, "maximum": 5}`,
		"number in [0.5, 2.25]": `{"type": "number", "minimum": 0.5, "maximum": 2.25}`,
		"number >= 0":           `{"type": "number", "minimum": 0}`,
		"integer >= 1":          `{"type": "integer", "minimum": 1}`,
		"number or null":        `{"type": ["number", "null"]}`,
		"any, at most -1":       `{"maximum": -1}`,
	}
	literals := []string{"0", "-0", "1", "-1", "-3", "-4", "5", "6", "0.5", "0.49", "2.25", "2.2500001", "1.0", "-3.0", "-3.5",
		"-2.5", "4.9", "5.0", "5.1", "1e0", "1E2", "5e-1", "-0.0", "9223372036854775807", "9223372036854775808",
		"-9223372036854775809", "123456789012345678901234567890.5", "null", "\"1\"", "true", "01", "1.", ".5", "-", "1e", "+1"}
	for name, src := range schemasByName {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(src))
		require.NoError(t, err)
		n, err := newFastCompiler(map[string]any{"urn:t": doc}).compile("urn:t")
		require.NoError(t, err)
		jc := jsonschema.NewCompiler()
		require.NoError(t, jc.AddResource("urn:t", doc))
		sch, err := jc.Compile("urn:t")
		require.NoError(t, err)
		for _, lit := range literals {
			lib := validate(sch, []byte(lit)) == nil
			fast := fastValid(n, []byte(lit))
			require.False(t, fast && !lib, "%s: %s accepted, the library refuses it", name, lit)
			// Every literal here is decidable: the fast path gives the
			// library's answer, not only a safe one.
			require.Equal(t, lib, fast, "%s: %s", name, lit)
		}
	}
}

func TestCmpDecimal(t *testing.T) {
	cases := []struct {
		neg   bool
		ip    int64
		frac  bool
		m     int64
		want  int
		reads string
	}{
		{false, 2, true, 3, -1, "2.5 < 3"},
		{false, 3, false, 3, 0, "3.0 = 3"},
		{false, 3, true, 3, 1, "3.5 > 3"},
		{true, 3, false, -3, 0, "-3.0 = -3"},
		{true, 3, true, -3, -1, "-3.5 < -3"},
		{true, 2, true, -3, 1, "-2.5 > -3"},
		{true, 0, true, 0, -1, "-0.5 < 0"},
		{true, 0, false, 0, 0, "-0.0 = 0"},
		{false, 0, true, 0, 1, "0.5 > 0"},
		{true, 4, false, 3, -1, "-4 < 3"},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, cmpDecimal(tc.neg, tc.ip, tc.frac, tc.m), tc.reads)
	}
}
