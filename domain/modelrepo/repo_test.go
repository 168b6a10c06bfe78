package modelrepo_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lowbarena/lowbarena/domain/modelrepo"
	"github.com/lowbarena/lowbarena/events/reason"
)

// TestParse: what a participant may write as a repository and a
// revision; credentials are refused and never echoed.
func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		base, rev string
		code      modelrepo.Code
		url       string // the file URL of "a/b c.json" when kept
	}{
		{base: "https://huggingface.co/Org/Model", rev: "main", url: "https://huggingface.co/Org/Model/resolve/main/a/b%20c.json"},
		{base: "https://HuggingFace.co/org/model/", rev: "refs/pr/1", url: "https://huggingface.co/org/model/resolve/refs%2Fpr%2F1/a/b%20c.json"},
		{base: "https://user:s3cret-pw@huggingface.co/org/model", rev: "main", code: reason.ReferenceURLCredentials},
		{base: "https://hf_tok3n@huggingface.co/org/model", rev: "main", code: reason.ReferenceURLCredentials},
		{base: "https://user:s3cret%zz@huggingface.co/org/model", rev: "main", code: reason.ReferenceURLCredentials},
		{base: "https://huggingface.co/org/model?token=s3cret-pw", rev: "main", code: reason.ReferenceURLInvalid},
		{base: "https://huggingface.co/org/model#frag", rev: "main", code: reason.ReferenceURLInvalid},
		{base: "ftp://huggingface.co/org/model", rev: "main", code: reason.ReferenceURLInvalid},
		{base: "file:///etc", rev: "main", code: reason.ReferenceURLInvalid},
		{base: "huggingface.co/org/model", rev: "main", code: reason.ReferenceURLInvalid},
		{base: "https://huggingface.co", rev: "main", code: reason.ReferenceURLInvalid},
		{base: "https://huggingface.co/org/../model", rev: "main", code: reason.ReferenceURLInvalid},
		{base: "", rev: "main", code: reason.ReferenceURLInvalid},
		{base: "https://huggingface.co/org/model", rev: "", code: reason.ReferenceRevisionInvalid},
		{base: "https://huggingface.co/org/model", rev: "../../x", code: reason.ReferenceRevisionInvalid},
		{base: "https://huggingface.co/org/model", rev: "main branch", code: reason.ReferenceRevisionInvalid},
	}
	for _, tc := range cases {
		r, err := modelrepo.Parse(tc.base, tc.rev)
		if tc.code == "" {
			require.NoError(t, err, tc.base)
			require.Equal(t, tc.url, r.FileURL("a/b c.json").String())
			continue
		}
		require.Equal(t, tc.code, modelrepo.CodeOf(err), "%s: %v", tc.base, err)
		for _, secret := range []string{"s3cret", "hf_tok3n"} {
			require.NotContains(t, err.Error(), secret, "the sentence never echoes a credential")
		}
	}
}
