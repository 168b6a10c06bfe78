package participant

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// HashParams are argon2id's cost parameters.
type HashParams struct {
	// Memory is in KiB.
	Memory  uint32
	Time    uint32
	Threads uint8
	KeyLen  uint32
}

// DefaultHashParams are OWASP's first argon2id configuration (19 MiB, two
// passes, one lane): about 20 to 40 ms per verification on a server core.
// The secrets are 256 random bits, so the hash is a second line, for a
// participants bucket that leaks: it makes every stolen hash expensive to
// test, and a stolen bucket never yields a working token.
//
// Argon2id rather than bcrypt: it is memory-hard (RFC 9106), so a GPU
// or ASIC testing stolen hashes gains far less over the server than with
// bcrypt's 4 KiB; its parameters travel in each hash (PHC form), so they
// can be raised without invalidating tokens; and it takes the whole
// secret where bcrypt reads only 72 bytes.
var DefaultHashParams = HashParams{Memory: 19 * 1024, Time: 2, Threads: 1, KeyLen: 32}

// Bounds on the parameters a stored hash may carry, so that a damaged or
// planted entry cannot make one verification take a gigabyte or a
// minute.
const (
	maxHashMemory  = 256 * 1024
	maxHashTime    = 16
	maxHashThreads = 16
)

var b64 = base64.RawStdEncoding

// HashSecret returns the argon2id hash of secret with a fresh 16-byte
// salt, in the PHC string form the reference implementation writes:
//
//	$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>
func HashSecret(secret string, p HashParams) (string, error) {
	var salt [16]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return "", fmt.Errorf("participant: %w", err)
	}
	key := argon2.IDKey([]byte(secret), salt[:], p.Time, p.Memory, p.Threads, p.KeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		b64.EncodeToString(salt[:]), b64.EncodeToString(key)), nil
}

// ErrBadHash is a stored hash that is not an argon2id PHC string within
// bounds.
var ErrBadHash = errors.New("participant: bad stored hash")

// VerifySecret reports whether secret matches the PHC hash encoded, in
// constant time over the hash. A hash that does not parse, or whose
// parameters are outside the bounds above, is an error wrapping
// ErrBadHash.
func VerifySecret(encoded, secret string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false, fmt.Errorf("%w: not an argon2id PHC string", ErrBadHash)
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, fmt.Errorf("%w: version %q", ErrBadHash, parts[2])
	}
	var p HashParams
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil {
		return false, fmt.Errorf("%w: parameters %q", ErrBadHash, parts[3])
	}
	if p.Memory < 8*uint32(p.Threads) || p.Memory > maxHashMemory || p.Time < 1 || p.Time > maxHashTime || p.Threads < 1 || p.Threads > maxHashThreads {
		return false, fmt.Errorf("%w: parameters %q out of bounds", ErrBadHash, parts[3])
	}
	salt, err := b64.DecodeString(parts[4])
	if err != nil || len(salt) < 8 || len(salt) > 64 {
		return false, fmt.Errorf("%w: salt", ErrBadHash)
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) < 16 || len(want) > 64 {
		return false, fmt.Errorf("%w: hash", ErrBadHash)
	}
	got := argon2.IDKey([]byte(secret), salt, p.Time, p.Memory, p.Threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
