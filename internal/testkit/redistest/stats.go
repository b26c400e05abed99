package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's counts in INFO commandstats.
type CommandStat struct {
	// Calls is how many times the command ran; Failed how many of those
	// failed (Redis 7's failed_calls; 0 on older servers).
	Calls, Failed int
}

// CommandStats reads INFO commandstats of the server c talks to: each
// command's name (lower case, as Redis lists it) and its counts. A command
// a script runs is counted too, under its own name.
func CommandStats(t testing.TB, c *redis.Client) map[string]CommandStat {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return parseCommandStats(info)
}

// CommandCalls is CommandStats with the calls alone.
func CommandCalls(t testing.TB, c *redis.Client) map[string]int {
	t.Helper()
	out := map[string]int{}
	for name, s := range CommandStats(t, c) {
		out[name] = s.Calls
	}
	return out
}

// parseCommandStats parses the lines
// cmdstat_<name>:calls=<n>,usec=...,failed_calls=<n> of INFO commandstats.
func parseCommandStats(info string) map[string]CommandStat {
	out := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat {
			continue
		}
		var s CommandStat
		for _, f := range strings.Split(rest, ",") {
			key, v, _ := strings.Cut(f, "=")
			switch key {
			case "calls":
				s.Calls, _ = strconv.Atoi(v)
			case "failed_calls":
				s.Failed, _ = strconv.Atoi(v)
			}
		}
		out[name] = s
	}
	return out
}
