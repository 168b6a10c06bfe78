package tokenizer

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// qwen2Pattern is the Split expression of Qwen2's and Qwen3's
// tokenizer.json.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// qwen2TestTokenizer is the tokenizer of transformers'
// tests/models/qwen2/test_tokenization_qwen2.py (the byte alphabet in
// bytes_to_unicode's order, its fourteen extra tokens and ten merges,
// <|endoftext|> added after them), laid out as Qwen2TokenizerFast saves a
// tokenizer.json: NFC, a Split on Qwen2's expression, ByteLevel without
// its own expression, merges as "a b" strings.
func qwen2TestTokenizer(t *testing.T, mergesAsPairs bool) []byte {
	t.Helper()
	var alphabet []string
	var rest []string
	next := 256
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			alphabet = append(alphabet, string(rune(b)))
		} else {
			rest = append(rest, string(rune(next)))
			next++
		}
	}
	vocabList := append(alphabet, rest...)
	vocabList = append(vocabList, "\u0120l", "\u0120n", "\u0120lo", "\u0120low", "er", "\u0120lowest", "\u0120newer",
		"\u0120wider", "01", ";}", ";}\u010a", "\u00cf\u0135", "\u0120#", "##")
	vocab := map[string]int{}
	for i, v := range vocabList {
		vocab[v] = i
	}
	merges := []string{"\u0120 l", "\u0120l o", "\u0120lo w", "e r", "0 1", "; }", ";} \u010a", "\u00cf \u0135", "\u0120 #", "# #"}
	var mergesJSON any = merges
	if mergesAsPairs {
		var pairs [][2]string
		for _, m := range merges {
			var a, b string
			for i := range len(m) {
				if m[i] == ' ' {
					a, b = m[:i], m[i+1:]
					break
				}
			}
			pairs = append(pairs, [2]string{a, b})
		}
		mergesJSON = pairs
	}
	doc := map[string]any{
		"version": "1.0",
		"added_tokens": []any{map[string]any{"id": len(vocabList), "content": "<|endoftext|>", "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true}},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": mergesJSON},
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return b
}

// TestQwen2Examples checks the reader against the examples of
// transformers' Qwen2 tokenizer test: the tokens and ids of its full
// tokenizer test (NFC, digits split one by one, symbols merged with
// their newline, the added token split off, merges that the
// pre-tokenization makes ineffective), its number-sign test, and its
// NFC test.
func TestQwen2Examples(t *testing.T) {
	for _, pairs := range []bool{false, true} {
		tok, err := Parse(qwen2TestTokenizer(t, pairs))
		require.NoError(t, err)
		cases := []struct {
			name   string
			text   string
			tokens []string
			ids    []int
		}{
			{"full tokenizer", "lower lower newer 010;}\n<|endoftext|>\u03d2\u0301",
				[]string{"l", "o", "w", "er", "\u0120low", "er", "\u0120", "n", "e", "w", "er", "\u0120", "0", "1", "0", ";}\u010a", "<|endoftext|>", "\u00cf\u0135"},
				[]int{75, 78, 86, 260, 259, 260, 220, 77, 68, 86, 260, 220, 15, 16, 15, 266, 270, 267}},
			{"token with number sign", " ###", []string{"\u0120#", "##"}, []int{268, 269}},
		}
		for _, c := range cases {
			require.Equal(t, c.tokens, tok.Tokens(c.text), c.name)
			require.Equal(t, c.ids, tok.Encode(c.text), c.name)
			require.Equal(t, len(c.ids), tok.Count(c.text), c.name)
		}
		// The decode of the full example is its NFC form (the test's
		// output text).
		require.Equal(t, "lower lower newer 010;}\n<|endoftext|>\u03d3", tok.Decode(tok.Encode(cases[0].text)))
		// NFC only: the three characters whose four forms all differ.
		require.Equal(t, tok.Encode("\u03d3\u03d4\u1e9b"), tok.Encode("\u03d2\u0301\u03d2\u0308\u017f\u0307"))
	}
}

// TestWhitespaceRuns checks the translation of `\s+(?!\S)`: a run of
// spaces before a word leaves its last space to the word, a run at the
// end of the text stays whole, and a newline run is its own piece.
func TestWhitespaceRuns(t *testing.T) {
	tok, err := Parse(qwen2TestTokenizer(t, false))
	require.NoError(t, err)
	cases := []struct {
		text   string
		pieces []string
	}{
		{"a   lower", []string{"a", "  ", " lower"}},
		{"lower   ", []string{"lower", "   "}},
		{"a \n\n  b", []string{"a", " \n\n", " ", " b"}},
		{"x  1", []string{"x", " ", " ", "1"}},
	}
	for _, c := range cases {
		st := tok.pre[0]
		require.Equal(t, c.pieces, st.split(c.text), "%q", c.text)
	}
	// GPT-2's expression through the ByteLevel pre-tokenizer.
	gpt2, err := Parse([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},
		"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}}`))
	require.NoError(t, err)
	require.Equal(t, []string{"Hello", ",", "  ", " world", "'s", " 42", "!!", "\n"}, gpt2.pre[0].split("Hello,   world's 42!!\n"))
}

// TestRoundTrip checks that decoding the ids of a text gives the text
// back, bytes outside ASCII included.
func TestRoundTrip(t *testing.T) {
	tok, err := Parse(qwen2TestTokenizer(t, false))
	require.NoError(t, err)
	for _, s := range []string{"", "lower newer wider", "Compute 12 + 3 * 4.\nAnswer: B", "naïve café 🤗 世界", "  \t spaces \n"} {
		require.Equal(t, s, tok.Decode(tok.Encode(s)), "%q", s)
	}
}

// TestRefused checks that what the reader does not implement is refused,
// never read differently.
func TestRefused(t *testing.T) {
	cases := []struct {
		name string
		json string
		err  error
	}{
		{"not JSON", `{`, ErrInvalid},
		{"WordPiece", `{"model":{"type":"WordPiece","vocab":{}}}`, ErrUnsupported},
		{"SentencePiece BPE", `{"model":{"type":"BPE","vocab":{},"merges":[],"byte_fallback":true}}`, ErrUnsupported},
		{"Metaspace", `{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":{"type":"Metaspace"}}`, ErrUnsupported},
		{"NFKC", `{"model":{"type":"BPE","vocab":{},"merges":[]},"normalizer":{"type":"NFKC"}}`, ErrUnsupported},
		{"lookbehind", `{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(?<=a)b"},"behavior":"Isolated"}}`, ErrUnsupported},
		{"bad merge", `{"model":{"type":"BPE","vocab":{},"merges":["ab"]}}`, ErrInvalid},
		{"unknown unk", `{"model":{"type":"BPE","vocab":{},"merges":[],"unk_token":"<unk>"}}`, ErrInvalid},
		{"Removed split", `{"model":{"type":"BPE","vocab":{},"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"Removed"}}`, ErrUnsupported},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.json))
		require.ErrorIs(t, err, c.err, c.name)
	}
}
