package participant

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCanRead(t *testing.T) {
	alice := Viewer{Kind: KindParticipant, Name: "alice"}
	bob := Viewer{Kind: KindParticipant, Name: "bob"}
	op := Viewer{Kind: KindOperator, Name: "ops"}
	tests := []struct {
		name         string
		v            Viewer
		owner, split string
		want         bool
	}{
		{"the public reads ranked", Public, "alice", "ranked", true},
		{"the public does not read dev", Public, "alice", "dev", false},
		{"the owner reads its dev", alice, "alice", "dev", true},
		{"another participant does not read dev", bob, "alice", "dev", false},
		{"another participant reads ranked", bob, "alice", "ranked", true},
		{"an operator reads dev", op, "alice", "dev", true},
		{"an unknown split is private", Public, "alice", "holdout", false},
		{"an empty split is private", bob, "alice", "", false},
		{"a nameless participant owns nothing", Viewer{Kind: KindParticipant}, "", "dev", false},
		{"an operator named like the owner is still an operator", Viewer{Kind: KindOperator, Name: "alice"}, "bob", "dev", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.v.CanRead(tt.owner, tt.split))
		})
	}
}

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{
		"example-team": true, "a": true, "team_7": true, "0day": true,
		"": false, "-team": false, "Team": false, "a.b": false, "a b": false, "ü": false,
		"x234567890123456789012345678901234567890123456789012345678901234":  true,
		"x2345678901234567890123456789012345678901234567890123456789012345": false,
	} {
		require.Equal(t, ok, ValidName(name), "%q", name)
	}
}
