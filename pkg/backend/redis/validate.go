package redis

import (
	"fmt"
	"strings"
	"time"
)

// The Check functions validate one field of Options each, so that a caller
// that sets the field from its own input (a flag, an environment variable)
// can reject a bad value naming that input, with the backend's own rule.
// Options' normalization applies the same functions; a value they accept
// means the same thing in every layer (0 always means the field's default).

// CheckType validates Options.Type: empty (single), "single", "sentinel"
// or "cluster", in any case.
func CheckType(t string) error {
	switch strings.ToLower(strings.TrimSpace(t)) {
	case "", TypeSingle, TypeSentinel, TypeCluster:
		return nil
	}
	return fmt.Errorf("redis type %q: want single, sentinel or cluster", t)
}

// CheckSocketType validates Options.SocketType: empty (inferred from the
// URL), "tcp" or "unix", in any case.
func CheckSocketType(t string) error {
	switch strings.ToLower(strings.TrimSpace(t)) {
	case "", "tcp", "unix":
		return nil
	}
	return fmt.Errorf("redis socket type %q: want tcp or unix", t)
}

// CheckPoolSize validates Options.PoolSize: not negative (0 means
// go-redis's default, 10 per CPU).
func CheckPoolSize(n int) error {
	if n < 0 {
		return fmt.Errorf("redis pool size %d is negative", n)
	}
	return nil
}

// CheckTimeout validates Options.Timeout: not negative (0 means
// DefaultTimeout).
func CheckTimeout(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("redis timeout %v is negative", d)
	}
	return nil
}

// CheckPipelineWindow validates Options.PipelineWindow: not negative (0
// never waits).
func CheckPipelineWindow(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("redis pipeline window %v is negative", d)
	}
	return nil
}

// CheckPipelineLimit validates Options.PipelineLimit: not negative (0
// means DefaultPipelineLimit).
func CheckPipelineLimit(n int) error {
	if n < 0 {
		return fmt.Errorf("redis pipeline limit %d is negative", n)
	}
	return nil
}

// CheckKeyPrefix validates Options.KeyPrefix: no '{' or '}', which would
// break the cluster hash tag.
func CheckKeyPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return fmt.Errorf("key prefix %q contains '{' or '}', which would break the cluster hash tag", p)
	}
	return nil
}

// CheckBreakerOpenFor validates BreakerOptions.OpenFor: not negative (0
// means DefaultBreakerOpenFor).
func CheckBreakerOpenFor(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("breaker open period %v is negative", d)
	}
	return nil
}

// CheckTLSClientPair validates Options.TLSClientCert and TLSClientKey: both
// or neither.
func CheckTLSClientPair(cert, key string) error {
	if (cert == "") != (key == "") {
		return fmt.Errorf("redis TLS client certificate and key must be given together")
	}
	return nil
}
