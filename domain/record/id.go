package record

// ValidID reports whether id can be a submission, round, job or task id:
// 1 to 128 of A-Z, a-z, 0-9, '_' and '-' (the pattern
// ^[A-Za-z0-9_-]{1,128}$ of the schemas). Submission, round, job and task
// ids are hex or short slugs, never wildcards, dots or spaces, so each can
// be a NATS subject token. A loop rather than a regexp: every publish
// checks its subject with it.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
