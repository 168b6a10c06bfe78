package examples

import (
	"fmt"

	"github.com/lowbarena/lowbarena/domain/tokenizer"
)

// specialTokens are the tiny tokenizer's added tokens, by id.
var specialTokens = []struct {
	id      int
	content string
}{
	{endOfTextID, "<|endoftext|>"},
	{imStartID, "<|im_start|>"},
	{imEndID, "<|im_end|>"},
}

// chatTemplate is a minimal ChatML template, as Qwen models use.
const chatTemplate = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// byteLevelAlphabet returns GPT-2's byte-to-unicode map: the printable
// characters that stand for each of the 256 bytes in a byte-level BPE
// vocabulary.
func byteLevelAlphabet() []rune {
	out := make([]rune, 256)
	next := rune(256)
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			out[b] = rune(b)
			continue
		}
		out[b] = next
		next++
	}
	return out
}

// tokenizerFiles returns the tokenizer and generation files every bundle
// holds: a byte-level BPE tokenizer (GPT-2's pre-tokenizer) whose
// vocabulary is the 256 bytes, the merges it learned on the suite's text
// and the load's (see exampleMerges) and the ChatML special tokens, which
// a tokenizers library can load; the model's vocabulary is larger, as
// real ones are padded.
func tokenizerFiles() (map[string][]byte, error) {
	vocab := map[string]int{}
	for b, r := range byteLevelAlphabet() {
		vocab[string(r)] = b
	}
	var added []map[string]any
	decoder := map[string]any{}
	for _, t := range specialTokens {
		added = append(added, map[string]any{
			"id": t.id, "content": t.content, "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": true,
		})
		decoder[fmt.Sprint(t.id)] = map[string]any{
			"content": t.content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true,
		}
	}
	doc := func(merges []string) map[string]any {
		return map[string]any{
			"version":        "1.0",
			"truncation":     nil,
			"padding":        nil,
			"added_tokens":   added,
			"normalizer":     map[string]any{"type": "NFC"},
			"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
			"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
			"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
			"model": map[string]any{
				"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
				"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges,
			},
		}
	}
	// Train the merges with the bytes-only tokenizer's pre-tokenizer,
	// then add each merged token to the vocabulary after the bytes.
	bare, err := jsonBytes(doc([]string{}))
	if err != nil {
		return nil, err
	}
	pre, err := tokenizer.Parse(bare)
	if err != nil {
		return nil, fmt.Errorf("examples: the example tokenizer: %w", err)
	}
	ms := exampleMerges(pre)
	for _, m := range ms {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
	}
	tok, err := jsonBytes(doc(mergeStrings(ms)))
	if err != nil {
		return nil, err
	}
	tokCfg, err := jsonBytes(map[string]any{
		"add_bos_token":                false,
		"add_prefix_space":             false,
		"added_tokens_decoder":         decoder,
		"additional_special_tokens":    []string{"<|im_start|>", "<|im_end|>"},
		"bos_token":                    nil,
		"chat_template":                chatTemplate,
		"clean_up_tokenization_spaces": false,
		"eos_token":                    "<|im_end|>",
		"errors":                       "replace",
		"model_max_length":             maxPositions,
		"pad_token":                    "<|endoftext|>",
		"split_special_tokens":         false,
		"tokenizer_class":              "Qwen2Tokenizer",
		"unk_token":                    nil,
	})
	if err != nil {
		return nil, err
	}
	gen, err := jsonBytes(map[string]any{
		"bos_token_id":         endOfTextID,
		"do_sample":            true,
		"eos_token_id":         []int{imEndID, endOfTextID},
		"pad_token_id":         endOfTextID,
		"temperature":          0.6,
		"top_k":                20,
		"top_p":                0.95,
		"transformers_version": "4.51.3",
	})
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"tokenizer.json": tok, "tokenizer_config.json": tokCfg, "generation_config.json": gen}, nil
}
