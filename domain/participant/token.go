package participant

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// An API token reads
//
//	lbp_<id>_<secret><check>
//
// lbp_ for a participant, lbo_ for an operator; id is 10 random bytes
// and secret 32, each in lower-case base32 without padding (16 and 52
// characters); check is the CRC-32 of everything before it (7
// characters). The id is public: the gateway finds the token by it, so
// an authentication costs one lookup and one hash, never a try of every
// hash. Only the secret's argon2id hash is stored. The checksum lets the
// gateway refuse a mistyped or truncated token before any lookup, and the
// prefixes let secret scanners recognise a leaked token.
const (
	PrefixParticipant = "lbp_"
	PrefixOperator    = "lbo_"

	idBytes     = 10
	secretBytes = 32
	idLen       = 16 // base32 of 10 bytes
	secretLen   = 52 // base32 of 32 bytes, unpadded
	checkLen    = 7  // base32 of 4 bytes, unpadded
	// TokenLen is the length of every token.
	TokenLen = len(PrefixParticipant) + idLen + 1 + secretLen + checkLen
)

var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ErrMalformed is a string that is not a token of the arena's form.
var ErrMalformed = errors.New("participant: malformed token")

// Parsed is a token taken apart.
type Parsed struct {
	Kind   Kind
	ID     string
	Secret string
}

// NewToken returns a fresh token of kind k, its id and its secret.
func NewToken(k Kind) (token string, p Parsed, err error) {
	prefix, err := prefixOf(k)
	if err != nil {
		return "", Parsed{}, err
	}
	var id [idBytes]byte
	var secret [secretBytes]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", Parsed{}, fmt.Errorf("participant: %w", err)
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", Parsed{}, fmt.Errorf("participant: %w", err)
	}
	p = Parsed{Kind: k, ID: b32.EncodeToString(id[:]), Secret: b32.EncodeToString(secret[:])}
	return prefix + p.ID + "_" + p.Secret + checksum(prefix+p.ID+"_"+p.Secret), p, nil
}

// Format writes p as a token, with its checksum: the inverse of Parse.
func (p Parsed) Format() (string, error) {
	prefix, err := prefixOf(p.Kind)
	if err != nil {
		return "", err
	}
	if !ValidTokenID(p.ID) || len(p.Secret) != secretLen || !base32ish(p.Secret) {
		return "", fmt.Errorf("%w: an id of %d and a secret of %d base32 characters make a token", ErrMalformed, idLen, secretLen)
	}
	body := prefix + p.ID + "_" + p.Secret
	return body + checksum(body), nil
}

func prefixOf(k Kind) (string, error) {
	switch k {
	case KindParticipant:
		return PrefixParticipant, nil
	case KindOperator:
		return PrefixOperator, nil
	}
	return "", fmt.Errorf("participant: unknown kind %q", k)
}

func checksum(body string) string {
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc32.ChecksumIEEE([]byte(body)))
	return b32.EncodeToString(c[:])
}

// Parse takes a token apart, checking its form and its checksum; it never
// looks anything up. Every failure wraps ErrMalformed with what is wrong,
// and never repeats the token.
func Parse(token string) (Parsed, error) {
	bad := func(why string) (Parsed, error) { return Parsed{}, fmt.Errorf("%w: %s", ErrMalformed, why) }
	var k Kind
	switch {
	case strings.HasPrefix(token, PrefixParticipant):
		k = KindParticipant
	case strings.HasPrefix(token, PrefixOperator):
		k = KindOperator
	default:
		return bad("an arena token starts with " + PrefixParticipant + " or " + PrefixOperator)
	}
	if len(token) != TokenLen {
		return bad(fmt.Sprintf("an arena token is %d characters, this one %d", TokenLen, len(token)))
	}
	rest := token[len(PrefixParticipant):]
	id, sep, secret, check := rest[:idLen], rest[idLen], rest[idLen+1:idLen+1+secretLen], rest[idLen+1+secretLen:]
	if sep != '_' || !base32ish(id) || !base32ish(secret) || !base32ish(check) {
		return bad("it holds characters an arena token does not")
	}
	if checksum(token[:len(token)-checkLen]) != check {
		return bad("its checksum does not match (a character is wrong or missing)")
	}
	return Parsed{Kind: k, ID: id, Secret: secret}, nil
}

func base32ish(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// ValidTokenID reports whether id has the form of a token id (16
// characters of lower-case base32).
func ValidTokenID(id string) bool { return len(id) == idLen && base32ish(id) }
