package loadgen

import (
	"encoding/json"
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

// BenchmarkParseChunk reads one vLLM completion chunk, beside
// encoding/json reading it into the struct the load generator used before.
func BenchmarkParseChunk(b *testing.B) {
	data := []byte(chunkCases[0])
	b.Run("parseChunk", func(b *testing.B) {
		var c chunk
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := parseChunk(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var c refChunk
			if err := json.Unmarshal(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
