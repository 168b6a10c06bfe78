package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/lowbarena/lowbarena/domain/suite"
	"github.com/lowbarena/lowbarena/domain/tokenizer"
)

// Tokens is how simengine writes its output: the checkpoint's own
// tokenizer where its folder holds a tokenizer.json it can read (each
// streamed chunk is one token of it, a reply is its text's tokens, and
// the rest are whole-word tokens, so the text re-tokenises to the count
// the engine claims), else pieces of four bytes (CountTokens).
type Tokens struct {
	tok *tokenizer.Tokenizer
	// words are the tokens that are a space and a word, each encoding to
	// itself alone: the filler after a reply.
	words []string
}

// LoadTokens reads dir/tokenizer.json; a folder without one, or with one
// this reader cannot read, writes four-byte pieces (and says so in why).
func LoadTokens(dir string) (Tokens, string) {
	path := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(path); err != nil {
		return Tokens{}, "no tokenizer.json: tokens are pieces of four bytes"
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		return Tokens{}, fmt.Sprintf("tokenizer.json not read (%v): tokens are pieces of four bytes", err)
	}
	word := regexp.MustCompile(`^ [a-z]{2,}$`)
	var words []string
	for id := range tok.Size() {
		s := tok.TokenText(id)
		if word.MatchString(s) {
			if ids := tok.Encode(s); len(ids) == 1 && ids[0] == id {
				words = append(words, s)
			}
		}
	}
	if len(words) == 0 {
		return Tokens{}, "tokenizer.json has no whole-word tokens: tokens are pieces of four bytes"
	}
	return Tokens{tok: tok, words: words}, fmt.Sprintf("tokenizer.json read: %d tokens, %d whole-word tokens for filler", tok.Size(), len(words))
}

// Count is a prompt's token count.
func (t Tokens) Count(text string) int64 {
	if t.tok == nil {
		return CountTokens(text)
	}
	return max(int64(t.tok.Count(text)), 1)
}

// Pieces splits a reply into its tokens' texts.
func (t Tokens) Pieces(text string) []string {
	if t.tok == nil {
		return pieces(text)
	}
	ids := t.tok.Encode(text)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = t.tok.TokenText(id)
	}
	return out
}

// Filler is the text of the i-th generated token of request req when it
// is not part of a reply.
func (t Tokens) Filler(seed, req, i int64) string {
	v := (seed*1000003 + req*7919 + i*104729) % 50000
	if v < 0 {
		v += 50000
	}
	if t.tok == nil {
		return fmt.Sprintf("tok%d ", v)
	}
	return t.words[int(v)%len(t.words)]
}

var (
	knownOnce sync.Once
	known     map[string]bool
)

// KnownItem reports whether prompt is an item of the published dev suite
// (the generator's dev seed and sizes): what a cheating engine can learn
// and recognise. The held-out ranked split it cannot.
func KnownItem(prompt string) bool {
	knownOnce.Do(func() {
		known = map[string]bool{}
		s := suite.Generate("lowb-gen", "1", suite.SplitDev, suite.SeedDev, suite.DevSizes)
		for _, d := range s.Domains {
			for _, it := range s.Items[d] {
				known[it.Prompt] = true
			}
		}
	})
	return known[prompt]
}
