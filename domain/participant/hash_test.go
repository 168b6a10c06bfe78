package participant

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVerifySecretAgainstReference: hashes written by the reference
// implementation of argon2 (Debian's argon2 CLI, phc-winner-argon2
// 20171227), for example
//
//	echo -n s3cr3t-token-secret | argon2 lowbarenasalt16b -id -t 2 -k 19456 -p 1 -e
//
// verify with the right secret and not with another.
func TestVerifySecretAgainstReference(t *testing.T) {
	tests := []struct {
		name, hash string
	}{
		{"default parameters", "$argon2id$v=19$m=19456,t=2,p=1$bG93YmFyZW5hc2FsdDE2Yg$QhM+57gGqVEK8T/UcVKEh6/RHurXk0Q9yZY2X4bLGXg"},
		{"two lanes, 4 MiB, three passes", "$argon2id$v=19$m=4096,t=3,p=2$c2FsdHNhbHRzYWx0$8r/k6m1oAnWd3WJOcgoNRx249sh7vlr3HF/DSGfdC9A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, err := VerifySecret(tt.hash, "s3cr3t-token-secret")
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = VerifySecret(tt.hash, "s3cr3t-token-secreT")
			require.NoError(t, err)
			require.False(t, ok)
		})
	}
}

func TestHashSecret(t *testing.T) {
	p := HashParams{Memory: 1024, Time: 1, Threads: 1, KeyLen: 32}
	h1, err := HashSecret("abc", p)
	require.NoError(t, err)
	h2, err := HashSecret("abc", p)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(h1, "$argon2id$v=19$m=1024,t=1,p=1$"), h1)
	require.NotEqual(t, h1, h2, "a fresh salt each time")
	for _, h := range []string{h1, h2} {
		ok, err := VerifySecret(h, "abc")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = VerifySecret(h, "abd")
		require.NoError(t, err)
		require.False(t, ok)
	}
	def, err := HashSecret("abc", DefaultHashParams)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(def, "$argon2id$v=19$m=19456,t=2,p=1$"), def)
}

func TestVerifySecretRefusesBadHashes(t *testing.T) {
	const salt, key = "c2FsdHNhbHRzYWx0", "8r/k6m1oAnWd3WJOcgoNRx249sh7vlr3HF/DSGfdC9A"
	for name, h := range map[string]string{
		"empty":            "",
		"bcrypt":           "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy",
		"argon2i":          "$argon2i$v=19$m=4096,t=3,p=2$" + salt + "$" + key,
		"old version":      "$argon2id$v=16$m=4096,t=3,p=2$" + salt + "$" + key,
		"a gigabyte":       "$argon2id$v=19$m=1048576,t=3,p=2$" + salt + "$" + key,
		"a hundred passes": "$argon2id$v=19$m=4096,t=100,p=2$" + salt + "$" + key,
		"no lanes":         "$argon2id$v=19$m=4096,t=3,p=0$" + salt + "$" + key,
		"short salt":       "$argon2id$v=19$m=4096,t=3,p=2$c2FsdA$" + key,
		"short key":        "$argon2id$v=19$m=4096,t=3,p=2$" + salt + "$c2FsdA",
		"not base64":       "$argon2id$v=19$m=4096,t=3,p=2$" + salt + "$!!!",
	} {
		t.Run(name, func(t *testing.T) {
			ok, err := VerifySecret(h, "s3cr3t-token-secret")
			require.False(t, ok)
			require.True(t, errors.Is(err, ErrBadHash), "%v", err)
		})
	}
}

// BenchmarkVerifyDefault is the cost of one token verification at the
// default parameters.
func BenchmarkVerifyDefault(b *testing.B) {
	h, err := HashSecret("s3cr3t-token-secret", DefaultHashParams)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		ok, err := VerifySecret(h, "s3cr3t-token-secret")
		if err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}
