// Package tokenizer reads a Hugging Face tokenizer.json of a byte-level BPE
// model (GPT-2, Qwen2/Qwen3, Llama 3 and most of today's LLMs) and encodes
// and decodes text with it, as the tokenizers library does: added tokens
// are split off first, the rest is normalized (NFC where the file says
// so), pre-tokenized (the ByteLevel pre-tokenizer's GPT-2 expression, or a
// Split with the model's own expression), mapped to the byte-level
// alphabet, and merged pair by pair in the order of the merges list.
//
// The arena uses it to count tokens itself: the token-honesty audit
// re-tokenises the text an engine streamed and compares the count with
// the tokens the engine claims.
//
// Supported: model BPE (merges as "a b" strings or ["a", "b"] pairs,
// unk_token, ignore_merges), normalizers NFC and Sequence of NFC,
// pre-tokenizers ByteLevel, Split (behavior Isolated) and Sequence of
// them, decoder ByteLevel. Anything else is ErrUnsupported, never a
// silently different count.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Errors of Parse.
var (
	// ErrUnsupported is a tokenizer.json whose model, normalizer,
	// pre-tokenizer or expression this reader does not implement.
	ErrUnsupported = errors.New("tokenizer: unsupported")
	// ErrInvalid is a tokenizer.json that does not decode or is
	// inconsistent (a merge of tokens outside the vocabulary).
	ErrInvalid = errors.New("tokenizer: invalid tokenizer.json")
)

// MaxFileBytes bounds a tokenizer.json read by Load (real ones are 2 to
// 20 MB).
const MaxFileBytes = 64 << 20

// GPT2Pattern is the ByteLevel pre-tokenizer's expression (use_regex:
// true), as the tokenizers library writes it.
const GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// lookahead is the one lookaround the models' expressions use: a run of
// white space not followed by a non-space, then any run of white space.
// Go's regexp has no lookaround; the run is matched by a named group and
// shortened by one character where a non-space follows (see split).
const lookahead = `\s+(?!\S)|\s+`

// Tokenizer is a loaded byte-level BPE tokenizer. It is safe for
// concurrent use.
type Tokenizer struct {
	vocab  map[string]int
	byID   map[int]string
	ranks  map[[2]string]int
	added  []addedToken // longest content first
	isAdd  map[int]bool
	unk    int // -1: none
	nfc    bool
	pre    []preStep
	noMrg  bool // ignore_merges: a word in the vocabulary is one token
	decode bool // decoder is ByteLevel

	mu    sync.Mutex
	cache map[string][]int
}

type addedToken struct {
	Content string `json:"content"`
	ID      int    `json:"id"`
	Special bool   `json:"special"`
}

// preStep is one pre-tokenizer: an expression (nil: the whole piece) and
// whether its ByteLevel mapping applies with a prefix space.
type preStep struct {
	re          *regexp.Regexp
	wsGroup     int // index of the lookahead run's group, or -1
	byteLevel   bool
	prefixSpace bool
}

type fileJSON struct {
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         modelJSON       `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
}

type modelJSON struct {
	Type         string            `json:"type"`
	Vocab        map[string]int    `json:"vocab"`
	Merges       []json.RawMessage `json:"merges"`
	UnkToken     *string           `json:"unk_token"`
	IgnoreMerges bool              `json:"ignore_merges"`
	ByteFallback bool              `json:"byte_fallback"`
	Prefix       string            `json:"continuing_subword_prefix"`
	Suffix       string            `json:"end_of_word_suffix"`
}

// Load reads a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if fi.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, above the %d-byte limit", ErrInvalid, path, fi.Size(), MaxFileBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return Parse(data)
}

// Parse reads the contents of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("%w: model type %q (only BPE is read)", ErrUnsupported, f.Model.Type)
	}
	if f.Model.ByteFallback || f.Model.Prefix != "" || f.Model.Suffix != "" {
		return nil, fmt.Errorf("%w: BPE with byte_fallback or subword affixes (a SentencePiece-style model)", ErrUnsupported)
	}
	t := &Tokenizer{vocab: f.Model.Vocab, byID: make(map[int]string, len(f.Model.Vocab)), ranks: map[[2]string]int{},
		unk: -1, noMrg: f.Model.IgnoreMerges, cache: map[string][]int{}, isAdd: map[int]bool{}}
	for tok, id := range t.vocab {
		t.byID[id] = tok
	}
	for i, raw := range f.Model.Merges {
		var pair [2]string
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("%w: merge %d %q is not two tokens", ErrInvalid, i, s)
			}
			pair = [2]string{a, b}
		} else if err := json.Unmarshal(raw, &pair); err != nil {
			return nil, fmt.Errorf("%w: merge %d: %w", ErrInvalid, i, err)
		}
		if _, ok := t.ranks[pair]; !ok {
			t.ranks[pair] = i
		}
	}
	if u := f.Model.UnkToken; u != nil {
		id, ok := t.vocab[*u]
		if !ok {
			return nil, fmt.Errorf("%w: unk_token %q is not in the vocabulary", ErrInvalid, *u)
		}
		t.unk = id
	}
	for _, a := range f.AddedTokens {
		if a.Content == "" {
			continue
		}
		t.added = append(t.added, a)
		t.byID[a.ID] = a.Content
		t.isAdd[a.ID] = true
	}
	slices.SortStableFunc(t.added, func(a, b addedToken) int { return len(b.Content) - len(a.Content) })
	var err error
	if t.nfc, err = normalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = preTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if len(f.Decoder) > 0 && string(f.Decoder) != "null" {
		var d struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(f.Decoder, &d); err != nil {
			return nil, fmt.Errorf("%w: decoder: %w", ErrInvalid, err)
		}
		if d.Type != "ByteLevel" {
			return nil, fmt.Errorf("%w: decoder %q (only ByteLevel is read)", ErrUnsupported, d.Type)
		}
		t.decode = true
	}
	return t, nil
}

func normalizer(raw json.RawMessage) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return false, fmt.Errorf("%w: normalizer: %w", ErrInvalid, err)
	}
	switch n.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		nfc := false
		for _, r := range n.Normalizers {
			v, err := normalizer(r)
			if err != nil {
				return false, err
			}
			nfc = nfc || v
		}
		return nfc, nil
	}
	return false, fmt.Errorf("%w: normalizer %q (only NFC is read)", ErrUnsupported, n.Type)
}

func preTokenizer(raw json.RawMessage) ([]preStep, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var p struct {
		Type           string            `json:"type"`
		Pretokenizers  []json.RawMessage `json:"pretokenizers"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
		Pattern        struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("%w: pre_tokenizer: %w", ErrInvalid, err)
	}
	switch p.Type {
	case "Sequence":
		var out []preStep
		for _, r := range p.Pretokenizers {
			s, err := preTokenizer(r)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "ByteLevel":
		st := preStep{byteLevel: true, prefixSpace: p.AddPrefixSpace, wsGroup: -1}
		if p.UseRegex == nil || *p.UseRegex {
			re, g, err := compile(GPT2Pattern)
			if err != nil {
				return nil, err
			}
			st.re, st.wsGroup = re, g
		}
		return []preStep{st}, nil
	case "Split":
		if p.Behavior != "Isolated" || p.Invert {
			return nil, fmt.Errorf("%w: Split with behavior %q invert %v (only Isolated is read)", ErrUnsupported, p.Behavior, p.Invert)
		}
		expr := ""
		switch {
		case p.Pattern.Regex != nil:
			expr = *p.Pattern.Regex
		case p.Pattern.String != nil:
			expr = regexp.QuoteMeta(*p.Pattern.String)
		default:
			return nil, fmt.Errorf("%w: Split without a pattern", ErrInvalid)
		}
		re, g, err := compile(expr)
		if err != nil {
			return nil, err
		}
		return []preStep{{re: re, wsGroup: g}}, nil
	}
	return nil, fmt.Errorf("%w: pre_tokenizer %q", ErrUnsupported, p.Type)
}

// compile translates a models' expression into Go's syntax: the
// lookahead run becomes a named group split handles.
func compile(expr string) (*regexp.Regexp, int, error) {
	translated := strings.Replace(expr, lookahead, `(?P<ws>\s+)`, 1)
	if strings.Contains(translated, "(?!") || strings.Contains(translated, "(?=") || strings.Contains(translated, "(?<") {
		return nil, -1, fmt.Errorf("%w: expression %q has a lookaround other than %s", ErrUnsupported, expr, lookahead)
	}
	re, err := regexp.Compile(translated)
	if err != nil {
		return nil, -1, fmt.Errorf("%w: expression %q: %w", ErrUnsupported, expr, err)
	}
	return re, re.SubexpIndex("ws"), nil
}

// split cuts s into the pieces of one Isolated split: every match, and
// every gap between matches. A run matched by the lookahead group and
// followed by a non-space gives its last character to the next piece, as
// `\s+(?!\S)` does.
func (st preStep) split(s string) []string {
	if st.re == nil {
		return []string{s}
	}
	var out []string
	for i := 0; i < len(s); {
		loc := st.re.FindStringSubmatchIndex(s[i:])
		if loc == nil || loc[1] == loc[0] {
			out = append(out, s[i:])
			break
		}
		start, end := i+loc[0], i+loc[1]
		if start > i {
			out = append(out, s[i:start])
		}
		if g := st.wsGroup; g >= 0 && loc[2*g] >= 0 && end < len(s) {
			next, _ := utf8.DecodeRuneInString(s[end:])
			if !unicode.IsSpace(next) {
				_, last := utf8.DecodeLastRuneInString(s[start:end])
				if end-last > start {
					end -= last
				}
			}
		}
		out = append(out, s[start:end])
		i = end
	}
	return out
}

// byteAlphabet is GPT-2's bytes_to_unicode: the printable character that
// stands for each byte in a byte-level vocabulary.
var byteAlphabet, byteOf = func() ([256]string, map[rune]byte) {
	var out [256]string
	back := map[rune]byte{}
	next := rune(256)
	for b := range 256 {
		r := rune(b)
		if !((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
			r = next
			next++
		}
		out[b] = string(r)
		back[r] = byte(b)
	}
	return out, back
}()

// Encode returns the token ids of text.
func (t *Tokenizer) Encode(text string) []int {
	var out []int
	for _, seg := range t.splitAdded(text) {
		if seg.added >= 0 {
			out = append(out, seg.added)
			continue
		}
		for _, p := range t.pieces(seg.text) {
			out = append(out, t.word(p)...)
		}
	}
	return out
}

// pieces normalizes text and runs the pre-tokenizers over it.
func (t *Tokenizer) pieces(s string) []string {
	if t.nfc {
		s = norm.NFC.String(s)
	}
	pieces := []string{s}
	for _, st := range t.pre {
		var next []string
		for _, p := range pieces {
			if st.prefixSpace && len(next) == 0 && p != "" && !strings.HasPrefix(p, " ") {
				p = " " + p
			}
			next = append(next, st.split(p)...)
		}
		pieces = next
	}
	return pieces
}

// Count is the number of tokens of text.
func (t *Tokenizer) Count(text string) int { return len(t.Encode(text)) }

// Tokens returns the vocabulary strings of text's tokens.
func (t *Tokenizer) Tokens(text string) []string {
	ids := t.Encode(text)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = t.byID[id]
	}
	return out
}

// ID returns a vocabulary string's id.
func (t *Tokenizer) ID(token string) (int, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// Size is the number of ids the tokenizer knows (vocabulary and added
// tokens).
func (t *Tokenizer) Size() int { return len(t.byID) }

// Decode returns the text of ids; an id the tokenizer does not know is
// skipped.
func (t *Tokenizer) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(t.TokenText(id))
	}
	return b.String()
}

// TokenText is the text of one token: its vocabulary string mapped back
// to bytes (an added token's content as it is). A token that is part of
// a multi-byte character is its bytes alone, not valid UTF-8.
func (t *Tokenizer) TokenText(id int) string {
	s, ok := t.byID[id]
	if !ok {
		return ""
	}
	if t.isAdd[id] || !t.decode {
		return s
	}
	var b []byte
	for _, r := range s {
		if c, ok := byteOf[r]; ok {
			b = append(b, c)
		} else {
			b = utf8.AppendRune(b, r)
		}
	}
	return string(b)
}

type segment struct {
	text  string
	added int // the added token's id, or -1 for text
}

// splitAdded cuts text at every added token, leftmost first, longest
// first at one position.
func (t *Tokenizer) splitAdded(text string) []segment {
	if len(t.added) == 0 {
		return []segment{{text, -1}}
	}
	var out []segment
	start := 0
	for i := 0; i < len(text); {
		found := false
		for _, a := range t.added {
			if strings.HasPrefix(text[i:], a.Content) {
				if i > start {
					out = append(out, segment{text[start:i], -1})
				}
				out = append(out, segment{a.Content, a.ID})
				i += len(a.Content)
				start, found = i, true
				break
			}
		}
		if !found {
			i++
		}
	}
	if start < len(text) {
		out = append(out, segment{text[start:], -1})
	}
	return out
}

// maxCache bounds the memo of encoded words.
const maxCache = 1 << 16

// word encodes one pre-tokenized piece: its bytes in the byte-level
// alphabet, merged pair by pair, lowest rank first.
func (t *Tokenizer) word(piece string) []int {
	if piece == "" {
		return nil
	}
	t.mu.Lock()
	if ids, ok := t.cache[piece]; ok {
		t.mu.Unlock()
		return ids
	}
	t.mu.Unlock()
	syms := make([]string, 0, len(piece))
	for i := 0; i < len(piece); i++ {
		syms = append(syms, byteAlphabet[piece[i]])
	}
	whole := strings.Join(syms, "")
	var ids []int
	if id, ok := t.vocab[whole]; ok && t.noMrg {
		ids = []int{id}
	} else {
		for len(syms) > 1 {
			best, at := -1, -1
			for i := 0; i+1 < len(syms); i++ {
				if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
					best, at = r, i
				}
			}
			if at < 0 {
				break
			}
			merged := syms[at] + syms[at+1]
			// Merge every occurrence of the pair, left to right.
			pair := [2]string{syms[at], syms[at+1]}
			next := syms[:0:0]
			for i := 0; i < len(syms); i++ {
				if i+1 < len(syms) && syms[i] == pair[0] && syms[i+1] == pair[1] {
					next = append(next, merged)
					i++
					continue
				}
				next = append(next, syms[i])
			}
			syms = next
		}
		for _, s := range syms {
			if id, ok := t.vocab[s]; ok {
				ids = append(ids, id)
			} else if t.unk >= 0 {
				ids = append(ids, t.unk)
			}
		}
	}
	t.mu.Lock()
	if len(t.cache) < maxCache {
		t.cache[piece] = ids
	}
	t.mu.Unlock()
	return ids
}

// Words returns the pre-tokenized pieces of text, each in the byte-level
// alphabet (the strings BPE merges), added tokens left out: what a BPE
// trainer counts.
func (t *Tokenizer) Words(text string) []string {
	var out []string
	for _, seg := range t.splitAdded(text) {
		if seg.added >= 0 {
			continue
		}
		for _, p := range t.pieces(seg.text) {
			var b strings.Builder
			for i := 0; i < len(p); i++ {
				b.WriteString(byteAlphabet[p[i]])
			}
			if b.Len() > 0 {
				out = append(out, b.String())
			}
		}
	}
	return out
}

// Alphabet returns the byte-level alphabet: the vocabulary string of
// each byte.
func Alphabet() [256]string { return byteAlphabet }
