package main

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// redisCommand sends one inline command to the Redis at addr and returns
// its reply line.
func redisCommand(t *testing.T, addr, cmd string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// A Redis error reaches the caller and the log in Redis's own words: with
// a wrong REDIS_AUTH, the gRPC status (Unavailable) and the log say
// WRONGPASS, not a decoding error.
func TestServeRedisErrorWords(t *testing.T) {
	rs := startRedis(t)
	if got := redisCommand(t, rs.Addr(), "CONFIG SET requirepass right"); got != "+OK" {
		t.Fatalf("CONFIG SET requirepass: %s", got)
	}
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(5))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "REDIS_URL=" + rs.Addr(), "REDIS_AUTH=wrong", "SLUICE_REDIS_BREAKER_FAILURES=-1"})
	code, out, errOut := runCmd(t, nil, "check", "--addr", s.grpc, "--domain", "api", "--descriptor", "k=v", "--timeout", "5s")
	if code == 0 || !strings.Contains(out+errOut, "Unavailable") || !strings.Contains(out+errOut, "WRONGPASS") {
		t.Errorf("check with a wrong REDIS_AUTH: exit %d, want Unavailable naming WRONGPASS:\n%s%s", code, out, errOut)
	}
	waitFor(t, "the log to name WRONGPASS", func() bool {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			if strings.Contains(line, "backend could not decide") && strings.Contains(line, "WRONGPASS") {
				return true
			}
		}
		return false
	})
}
