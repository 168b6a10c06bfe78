// Package participants keeps the arena's participants and operators and
// their API tokens in the KV bucket "participants", which the gateway
// alone writes, and authenticates the tokens that come with requests.
//
// Keys: "p.<name>" holds a participant.Participant, "t.<token id>" a
// participant.Token (the argon2id hash of its secret, never the secret).
// A token names its id, so an authentication is one KV read and at most
// one hash.
package participants

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lowbarena/lowbarena/domain/participant"
	"github.com/lowbarena/lowbarena/platform/bus"
)

// Errors of the registry.
var (
	// ErrExists is a name taken already.
	ErrExists = errors.New("participants: the name is taken")
	// ErrNotFound is a name the arena does not know.
	ErrNotFound = errors.New("participants: no such participant or operator")
	// ErrBadRequest is a name or kind the arena does not take.
	ErrBadRequest = errors.New("participants: bad request")
	// ErrMalformed is a string that is not a token's form (it wraps
	// participant.ErrMalformed, with what is wrong).
	ErrMalformed = participant.ErrMalformed
	// ErrInvalid is a token of the arena's form that is not one of its
	// tokens: no token has its id, or its secret is wrong. The two are
	// one error, so a caller learns nothing about which ids exist.
	ErrInvalid = errors.New("participants: not one of the arena's tokens")
	// ErrRevoked is a token that was revoked. It is only reported to
	// whoever holds the token's secret.
	ErrRevoked = errors.New("participants: the token was revoked")
)

// Options configure a Registry.
type Options struct {
	// Hash are the argon2id parameters of new tokens (default
	// participant.DefaultHashParams; tests lower them).
	Hash participant.HashParams
	// MaxHashing bounds the argon2id verifications running at once
	// (default 2): each holds the hash's memory (19 MiB by default), so a
	// flood of guessed secrets queues instead of exhausting memory.
	MaxHashing int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Registry reads and writes the participants bucket.
type Registry struct {
	kv      jetstream.KeyValue
	params  participant.HashParams
	now     func() time.Time
	hashing chan struct{}

	mu sync.Mutex
	// verified remembers, per token id, the KV revision and the sha256
	// of the secret last verified against it, so that a token used again
	// costs a KV read and a sha256, not another argon2id. Any change of
	// the token's entry (a revocation) moves its revision, and the next
	// use verifies again.
	verified map[string]verifiedToken
}

type verifiedToken struct {
	revision uint64
	secret   [32]byte
}

// New returns a registry over the participants bucket kv.
func New(kv jetstream.KeyValue, o Options) *Registry {
	if kv == nil {
		panic("participants: nil bucket")
	}
	if o.Hash == (participant.HashParams{}) {
		o.Hash = participant.DefaultHashParams
	}
	if o.MaxHashing <= 0 {
		o.MaxHashing = 2
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Registry{kv: kv, params: o.Hash, now: o.Now, hashing: make(chan struct{}, o.MaxHashing), verified: map[string]verifiedToken{}}
}

func participantKey(name string) string { return "p." + name }
func tokenKey(id string) string         { return "t." + id }

// Add creates a participant or operator named name and issues its first
// token, returned in clear once. A name taken already is ErrExists.
func (r *Registry) Add(ctx context.Context, name string, kind participant.Kind, limits participant.Limits) (string, participant.Token, error) {
	if !participant.ValidName(name) {
		return "", participant.Token{}, fmt.Errorf("%w: the name %q is not %s", ErrBadRequest, name, participant.NameRule)
	}
	if !kind.Valid() {
		return "", participant.Token{}, fmt.Errorf("%w: the kind %q is neither participant nor operator", ErrBadRequest, kind)
	}
	if err := limits.Validate(false); err != nil {
		return "", participant.Token{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if kind == participant.KindOperator {
		limits = participant.Limits{}
	}
	p := participant.Participant{Name: name, Kind: kind, CreatedAt: r.now().UTC(), Limits: limits}
	body, err := json.Marshal(p)
	if err != nil {
		return "", participant.Token{}, fmt.Errorf("participants: %w", err)
	}
	if _, err := r.kv.Create(ctx, participantKey(name), body); err != nil {
		if bus.Conflict(err) {
			return "", participant.Token{}, fmt.Errorf("%w: %s is a %s already", ErrExists, name, r.kindOf(ctx, name))
		}
		return "", participant.Token{}, fmt.Errorf("participants: add %s: %w", name, err)
	}
	return r.issue(ctx, p)
}

func (r *Registry) kindOf(ctx context.Context, name string) participant.Kind {
	if p, err := r.Get(ctx, name); err == nil {
		return p.Kind
	}
	return "name"
}

// Issue issues a further token for the participant or operator name.
func (r *Registry) Issue(ctx context.Context, name string) (string, participant.Token, error) {
	p, err := r.Get(ctx, name)
	if err != nil {
		return "", participant.Token{}, err
	}
	return r.issue(ctx, *p)
}

func (r *Registry) issue(ctx context.Context, p participant.Participant) (string, participant.Token, error) {
	plain, parsed, err := participant.NewToken(p.Kind)
	if err != nil {
		return "", participant.Token{}, err
	}
	hash, err := participant.HashSecret(parsed.Secret, r.params)
	if err != nil {
		return "", participant.Token{}, err
	}
	t := participant.Token{ID: parsed.ID, Kind: p.Kind, Name: p.Name, Hash: hash, CreatedAt: r.now().UTC()}
	body, err := json.Marshal(t)
	if err != nil {
		return "", participant.Token{}, fmt.Errorf("participants: %w", err)
	}
	// Create, never Put: a token id drawn twice (80 random bits) would
	// fail here rather than replace another's token.
	if _, err := r.kv.Create(ctx, tokenKey(t.ID), body); err != nil {
		return "", participant.Token{}, fmt.Errorf("participants: store token of %s: %w", p.Name, err)
	}
	return plain, t, nil
}

// Get returns the participant or operator name.
func (r *Registry) Get(ctx context.Context, name string) (*participant.Participant, error) {
	if !participant.ValidName(name) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	e, err := r.kv.Get(ctx, participantKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("participants: read %s: %w", name, err)
	}
	var p participant.Participant
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return nil, fmt.Errorf("participants: %s does not decode: %w", name, err)
	}
	return &p, nil
}

// Entry is a participant or operator with its tokens (their hashes
// included: callers show only ids and dates).
type Entry struct {
	participant.Participant
	Tokens []participant.Token
}

// List returns every participant and operator with its tokens, by name.
func (r *Registry) List(ctx context.Context) ([]Entry, error) {
	keys, err := r.keys(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Entry{}
	var tokens []participant.Token
	for _, k := range keys {
		e, err := r.kv.Get(ctx, k)
		if err != nil {
			continue // deleted meanwhile
		}
		switch {
		case strings.HasPrefix(k, "p."):
			var p participant.Participant
			if json.Unmarshal(e.Value(), &p) == nil {
				byName[p.Name] = &Entry{Participant: p}
			}
		case strings.HasPrefix(k, "t."):
			var t participant.Token
			if json.Unmarshal(e.Value(), &t) == nil {
				tokens = append(tokens, t)
			}
		}
	}
	for _, t := range tokens {
		if e := byName[t.Name]; e != nil {
			e.Tokens = append(e.Tokens, t)
		}
	}
	out := make([]Entry, 0, len(byName))
	for _, e := range byName {
		slices.SortFunc(e.Tokens, func(a, b participant.Token) int { return a.CreatedAt.Compare(b.CreatedAt) })
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (r *Registry) keys(ctx context.Context) ([]string, error) {
	l, err := r.kv.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("participants: list: %w", err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// Revoke revokes every token of name, or only tokenID when it is not
// empty, and returns the ids revoked now. A revoked token stays in the
// bucket (for the list), refused from then on.
func (r *Registry) Revoke(ctx context.Context, name, tokenID string) ([]string, error) {
	entries, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(entries, func(e Entry) bool { return e.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	var revoked []string
	found := tokenID == ""
	for _, t := range entries[i].Tokens {
		if tokenID != "" && t.ID != tokenID {
			continue
		}
		found = true
		done, err := r.revoke(ctx, t.ID)
		if err != nil {
			return revoked, err
		}
		if done {
			revoked = append(revoked, t.ID)
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: %s has no token %s", ErrNotFound, name, tokenID)
	}
	return revoked, nil
}

// revoke marks one token revoked by compare-and-set; it reports false for
// a token revoked already.
func (r *Registry) revoke(ctx context.Context, id string) (bool, error) {
	for range 8 {
		e, err := r.kv.Get(ctx, tokenKey(id))
		if err != nil {
			return false, fmt.Errorf("participants: read token %s: %w", id, err)
		}
		var t participant.Token
		if err := json.Unmarshal(e.Value(), &t); err != nil {
			return false, fmt.Errorf("participants: token %s does not decode: %w", id, err)
		}
		if t.Revoked() {
			return false, nil
		}
		now := r.now().UTC()
		t.RevokedAt = &now
		body, err := json.Marshal(t)
		if err != nil {
			return false, fmt.Errorf("participants: %w", err)
		}
		if _, err := r.kv.Update(ctx, tokenKey(id), body, e.Revision()); err == nil {
			return true, nil
		} else if !bus.Conflict(err) {
			return false, fmt.Errorf("participants: revoke token %s: %w", id, err)
		}
	}
	return false, fmt.Errorf("participants: revoke token %s: the entry kept changing", id)
}

// Authenticate returns who token acts as. Errors: ErrMalformed (with what
// is wrong, never the token), ErrInvalid, ErrRevoked, or another error
// when the bucket does not answer.
//
// Order matters: the form is checked before any read, the secret before
// revocation is told, so that only the holder of a revoked token learns
// it was revoked.
func (r *Registry) Authenticate(ctx context.Context, token string) (participant.Viewer, error) {
	p, err := participant.Parse(token)
	if err != nil {
		return participant.Viewer{}, err
	}
	e, err := r.kv.Get(ctx, tokenKey(p.ID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return participant.Viewer{}, ErrInvalid
	}
	if err != nil {
		return participant.Viewer{}, fmt.Errorf("participants: read token: %w", err)
	}
	var t participant.Token
	if err := json.Unmarshal(e.Value(), &t); err != nil || t.Kind != p.Kind || t.ID != p.ID {
		return participant.Viewer{}, ErrInvalid
	}
	sum := sha256.Sum256([]byte(p.Secret))
	r.mu.Lock()
	v, seen := r.verified[p.ID]
	r.mu.Unlock()
	if !seen || v.revision != e.Revision() || v.secret != sum {
		ok, err := r.verify(ctx, t.Hash, p.Secret)
		if err != nil {
			return participant.Viewer{}, err
		}
		if !ok {
			return participant.Viewer{}, ErrInvalid
		}
		r.mu.Lock()
		r.verified[p.ID] = verifiedToken{revision: e.Revision(), secret: sum}
		r.mu.Unlock()
	}
	if t.Revoked() {
		return participant.Viewer{}, ErrRevoked
	}
	return participant.Viewer{Kind: t.Kind, Name: t.Name}, nil
}

// verify runs one argon2id verification, waiting for a slot among
// MaxHashing.
func (r *Registry) verify(ctx context.Context, hash, secret string) (bool, error) {
	select {
	case r.hashing <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-r.hashing }()
	ok, err := participant.VerifySecret(hash, secret)
	if errors.Is(err, participant.ErrBadHash) {
		return false, nil // a damaged entry authenticates nobody
	}
	return ok, err
}
