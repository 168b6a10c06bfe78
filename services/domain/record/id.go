package record

import "regexp"

// idToken matches what may stand in an id: submission, round, job and task
// ids are hex or short slugs, never wildcards, dots or spaces, so each can
// be a NATS subject token.
var idToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// ValidID reports whether id can be a submission, round, job or task id.
func ValidID(id string) bool { return idToken.MatchString(id) }
