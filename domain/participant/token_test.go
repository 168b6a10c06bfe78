package participant

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokenRoundTrip(t *testing.T) {
	for _, k := range []Kind{KindParticipant, KindOperator} {
		t.Run(string(k), func(t *testing.T) {
			tok, p, err := NewToken(k)
			require.NoError(t, err)
			require.Len(t, tok, TokenLen)
			want := map[Kind]string{KindParticipant: PrefixParticipant, KindOperator: PrefixOperator}[k]
			require.True(t, strings.HasPrefix(tok, want), tok)
			got, err := Parse(tok)
			require.NoError(t, err)
			require.Equal(t, p, got)
			again, err := got.Format()
			require.NoError(t, err)
			require.Equal(t, tok, again)
			require.Equal(t, k, got.Kind)
			require.True(t, ValidTokenID(got.ID))
			other, _, err := NewToken(k)
			require.NoError(t, err)
			require.NotEqual(t, tok, other, "every token is fresh")
		})
	}
	_, _, err := NewToken("viewer")
	require.Error(t, err)
	_, err = Parsed{Kind: KindParticipant, ID: "short", Secret: "x"}.Format()
	require.ErrorIs(t, err, ErrMalformed)
}

func TestParseRefusesMalformed(t *testing.T) {
	good, _, err := NewToken(KindParticipant)
	require.NoError(t, err)
	// flip returns good with the character at i changed to another
	// character of the token alphabet.
	flip := func(i int) string {
		c := byte('a')
		if good[i] == 'a' {
			c = 'b'
		}
		return good[:i] + string(c) + good[i+1:]
	}
	idAt := len(PrefixParticipant)
	secretAt := idAt + idLen + 1
	tests := []struct {
		name, token, why string
	}{
		{"empty", "", "starts with lbp_ or lbo_"},
		{"another scheme", "ghp_" + good[4:], "starts with lbp_ or lbo_"},
		{"truncated", good[:len(good)-1], "is 80 characters, this one 79"},
		{"one too many", good + "a", "is 80 characters, this one 81"},
		{"upper case", strings.ToUpper(good[:4]) + good[4:], "starts with lbp_ or lbo_"},
		{"bad character", good[:secretAt] + "!" + good[secretAt+1:], "holds characters"},
		{"no separator", good[:secretAt-1] + "a" + good[secretAt:], "holds characters"},
		{"one id character changed", flip(idAt + 3), "checksum does not match"},
		{"one secret character changed", flip(secretAt + 10), "checksum does not match"},
		{"kind changed", PrefixOperator + good[4:], "checksum does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.token)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrMalformed))
			require.ErrorContains(t, err, tt.why)
			if len(tt.token) > 20 {
				require.NotContains(t, err.Error(), tt.token[20:], "a refusal never repeats the token")
			}
		})
	}
}
