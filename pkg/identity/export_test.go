package identity

import "strings"

// IsHashed reports whether id is a hashed identity: "#" and a digest.
func IsHashed(id string) bool { return strings.HasPrefix(id, "#") }
