package loadgen

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// refChunk is the event as encoding/json reads it: the reference the
// one-pass reader is held to.
type refChunk struct {
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
		Text         string  `json:"text"`
		Delta        struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

var chunkCases = []string{
	`{"id":"cmpl-1","object":"text_completion","created":1764849600,"model":"m","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`,
	`{"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":16,"total_tokens":144,"completion_tokens":128}}`,
	`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5}}`,
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`,
	`{"choices":[{"text":"a\n\"b\"\\ \u00e9\ud83d\ude00 \ud800","logprobs":{"tokens":["a"],"token_logprobs":[-0.25],"top_logprobs":[{"a":-0.25,"b":-1.5e3}]}}]}`,
	"{\"choices\":[{\"text\":\"é\xff\"}]}",
	`{"choices":[{"text":"x"},{"text":"y","finish_reason":"stop"}],"nested":[[],{},[1,-0.5e-3,true,false,null,{"k":[{}]}]]}`,
	` { "choices" : [ { "text" : "spaced" } ] } `,
	`{"choices":null,"usage":null}`,
	`{"choices":[{"text":null,"delta":null}]}`,
	`{}`,
}

// TestParseChunkReadsWhatEncodingJSONReads: the one-pass reader gives
// each choice's text (text, then delta.content), finish_reason and the
// usage exactly as encoding/json decodes them, escapes and invalid UTF-8
// included.
func TestParseChunkReadsWhatEncodingJSONReads(t *testing.T) {
	var c chunk
	for _, in := range chunkCases {
		t.Run(in, func(t *testing.T) {
			var ref refChunk
			require.NoError(t, json.Unmarshal([]byte(in), &ref))
			require.NoError(t, parseChunk([]byte(in), &c))
			require.Len(t, c.texts, len(ref.Choices))
			for i, ch := range ref.Choices {
				require.Equal(t, ch.Text+ch.Delta.Content, string(c.texts[i]))
				want := ""
				if ch.FinishReason != nil {
					want = *ch.FinishReason
				}
				require.Equal(t, want, c.finishes[i])
			}
			require.Equal(t, ref.Usage != nil, c.hasUsage)
			if ref.Usage != nil {
				require.Equal(t, ref.Usage.PromptTokens, c.promptTokens)
				require.Equal(t, ref.Usage.CompletionTokens, c.completionTokens)
			}
		})
	}
}

// TestParseChunkRefusesWhatIsNotAnEvent: whatever encoding/json refuses
// (bad syntax, a field of the wrong type, more after the end), the reader
// refuses too: the engine_bad_stream of a malformed stream.
func TestParseChunkRefusesWhatIsNotAnEvent(t *testing.T) {
	bad := []string{
		`{not json`, ``, `[]`, `"text"`, `{"choices":[{"text":"x"}]`, `{"choices":[{"text":"x"}]}}`,
		`{"choices":[{"text":1}]}`, `{"choices":{"text":"x"}}`, `{"choices":[{"finish_reason":true}]}`,
		`{"usage":{"completion_tokens":"5"}}`, `{"usage":{"completion_tokens":1.5}}`, `{"choices":[{"text":"a` + "\x01" + `"}]}`,
		`{"choices":[{"text":"\q"}]}`, `{"choices":[{"text":"\u12"}]}`, `{"x":01}`, `{"x":1.}`, `{"x":-}`, `{"x":tru}`,
		`{"x":[1,]}`, `{"x":{"a":1,}}`, `{"x" 1}`, `{'x':1}`, `{"choices":[{"text":"x"}]} {}`,
	}
	var c chunk
	for _, in := range bad {
		t.Run(in, func(t *testing.T) {
			var ref refChunk
			require.Error(t, json.Unmarshal([]byte(in), &ref), "the reference refuses it")
			require.ErrorIs(t, parseChunk([]byte(in), &c), errSyntax)
		})
	}
}

// FuzzParseChunk: on any bytes, the reader accepts only what encoding/json
// accepts, and then reads the same texts.
func FuzzParseChunk(f *testing.F) {
	for _, c := range chunkCases {
		f.Add([]byte(c))
	}
	var c chunk
	f.Fuzz(func(t *testing.T, data []byte) {
		if parseChunk(data, &c) != nil {
			return
		}
		var ref refChunk
		require.NoError(t, json.Unmarshal(data, &ref), "%q", data)
		require.Len(t, c.texts, len(ref.Choices))
		for i, ch := range ref.Choices {
			require.Equal(t, ch.Text+ch.Delta.Content, string(c.texts[i]))
		}
	})
}

// BenchmarkParseChunk reads one vLLM completion chunk in full, a stream of
// them with chunkReader's template, and the chunk with encoding/json into
// the struct the load generator used before; parseChunk's doc comment
// keeps the figures.
func BenchmarkParseChunk(b *testing.B) {
	data := []byte(chunkCases[0])
	b.Run("parseChunk", func(b *testing.B) {
		var c chunk
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if err := parseChunk(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A stream's token events, each its own text, read one after the
	// other from the template.
	b.Run("chunkReader", func(b *testing.B) {
		events := make([][]byte, 64)
		for i := range events {
			events[i] = []byte(vllmEvent(" tok"+strconv.Itoa(i), "null"))
		}
		var r chunkReader
		b.SetBytes(int64(len(events[0])))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := r.read(events[i%len(events)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var c refChunk
			if err := json.Unmarshal(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// vllmEvent is one event of a vLLM completion stream, as
// loadgentest.Paced writes it.
func vllmEvent(text, finish string) string {
	return `{"id":"cmpl-1","object":"text_completion","created":1764849600,"model":"m","choices":[{"index":0,"text":"` + text +
		`","logprobs":null,"finish_reason":` + finish + `,"stop_reason":null}],"usage":null}`
}

// chatEvent is one event of a chat completion stream.
func chatEvent(content string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + content + `"},"finish_reason":null}]}`
}

// requireSameRead requires the reader's read of an event to be a fresh
// parseChunk's: the same error or none, the same texts, finish_reasons
// and usage.
func requireSameRead(t *testing.T, r *chunkReader, in string) {
	t.Helper()
	var fresh chunk
	want := parseChunk([]byte(in), &fresh)
	got := r.read([]byte(in))
	if want != nil {
		require.ErrorIs(t, got, errSyntax, "%q", in)
		return
	}
	require.NoError(t, got, "%q", in)
	require.Len(t, r.c.texts, len(fresh.texts))
	for i := range fresh.texts {
		require.Equal(t, string(fresh.texts[i]), string(r.c.texts[i]), "%q", in)
	}
	require.Equal(t, append([]string{}, fresh.finishes...), append([]string{}, r.c.finishes...))
	require.Equal(t, fresh.hasUsage, r.c.hasUsage)
	require.Equal(t, fresh.promptTokens, r.c.promptTokens)
	require.Equal(t, fresh.completionTokens, r.c.completionTokens)
}

// TestChunkReaderReadsWhatParseChunkReads: a stream's events read one
// after another by a chunkReader (from its template where it can) read as
// each alone reads with parseChunk, malformed ones refused; and the
// template is used for the events that differ from the one before only in
// their text (reused counts them), and for no other.
func TestChunkReaderReadsWhatParseChunkReads(t *testing.T) {
	cases := []struct {
		name   string
		events []string
		reused int
	}{
		{"a vLLM completion stream", []string{vllmEvent(" tok0", "null"), vllmEvent(" tok1", "null"), vllmEvent("", "null"),
			vllmEvent(" a longer token, with punctuation: {}[]", "null"), vllmEvent(" tok4", `"length"`),
			`{"id":"cmpl-1","object":"text_completion","created":1764849600,"model":"m","choices":[],"usage":{"prompt_tokens":16,"total_tokens":21,"completion_tokens":5}}`}, 3},
		{"a chat stream", []string{
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			chatEvent("Hi"), chatEvent(" there"), chatEvent("!")}, 2},
		// The text's content is where a malformed event would hide:
		// a quote that ends the string early, a backslash, a control
		// character, bytes beyond ASCII; each is read in full.
		{"a quote in the text ends the literal early", []string{vllmEvent("a", "null"), vllmEvent(`b","logprobs":1,"x":"`, "null"), vllmEvent(`b","x`, "null")}, 0},
		{"escapes and UTF-8", []string{vllmEvent("a", "null"), vllmEvent(`\n\"\u00e9`, "null"), vllmEvent("é", "null"), vllmEvent("\xff", "null"), vllmEvent(`\`, "null"), vllmEvent("c", "null")}, 0},
		{"a control character", []string{vllmEvent("a", "null"), vllmEvent("b\x01", "null"), vllmEvent("c", "null")}, 0},
		{"the same text, the rest changed", []string{vllmEvent("a", "null"), vllmEvent("a", `"stop"`), vllmEvent("b", `"stop"`), vllmEvent("a", `"stop"`) + "x", vllmEvent("c", `"stop"`)}, 1},
		{"two choices are read in full", []string{`{"choices":[{"text":"a"},{"text":"b"}]}`, `{"choices":[{"text":"c"},{"text":"b"}]}`}, 0},
		{"a text and a content are read in full", []string{`{"choices":[{"text":"a","delta":{"content":"b"}}]}`, `{"choices":[{"text":"c","delta":{"content":"b"}}]}`}, 0},
		{"a text twice: the last", []string{`{"choices":[{"text":"a","text":"b"}]}`, `{"choices":[{"text":"a","text":"c"}]}`, `{"choices":[{"text":"c","text":"c"}]}`}, 1},
		{"choices twice: the last", []string{`{"choices":[{"text":"a"}],"choices":[{"text":"b"}]}`, `{"choices":[{"text":"a"}],"choices":[{"text":"d"}]}`}, 1},
		{"an escaped text is no template", []string{vllmEvent(`\u0061`, "null"), vllmEvent(`\u0062`, "null"), vllmEvent(`b`, "null")}, 0},
		{"a malformed event forgets the template", []string{vllmEvent("a", "null"), `{"choices":[{"text":"x"}]`, vllmEvent("b", "null"), vllmEvent("c", "null")}, 1},
		{"usage's counts come with the template", []string{`{"choices":[{"text":"a"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
			`{"choices":[{"text":"bc"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r chunkReader
			for _, e := range tc.events {
				requireSameRead(t, &r, e)
			}
			require.Equal(t, tc.reused, r.reused)
		})
	}
}

// FuzzChunkReader: whatever event came before, the reader reads the next
// as parseChunk reads it alone, and refuses what parseChunk refuses.
func FuzzChunkReader(f *testing.F) {
	f.Add([]byte(vllmEvent("a", "null")), []byte(vllmEvent(`b","x":"`, "null")))
	f.Add([]byte(vllmEvent("a", "null")), []byte(vllmEvent(`b\`, "null")))
	f.Add([]byte(chatEvent("a")), []byte(chatEvent("bc")))
	f.Add([]byte(`{"choices":[{"text":"x"}]}`), []byte(`{"choices":[{"text":"x"}]}}`))
	f.Add([]byte(`{"choices":[{"text":"","finish_reason":"stop"}]}`), []byte(`{"choices":[{"text":"é","finish_reason":"stop"}]}`))
	f.Fuzz(func(t *testing.T, first, next []byte) {
		var r chunkReader
		_ = r.read(first)
		requireSameRead(t, &r, string(next))
	})
}
