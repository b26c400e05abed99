package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MonitorLine is one command MONITOR printed.
type MonitorLine struct {
	// Source is who ran it: "lua" for a command a script or function ran,
	// else the client's address ("127.0.0.1:port", "unix:/path").
	Source string
	// Args are the command and its arguments, unquoted.
	Args []string
}

// FromScript reports whether a script or function ran the command.
func (l MonitorLine) FromScript() bool { return l.Source == "lua" }

// Command is the command's name in lower case.
func (l MonitorLine) Command() string {
	if len(l.Args) == 0 {
		return ""
	}
	return strings.ToLower(l.Args[0])
}

// DeclaredKeys returns the keys a script call (EVAL, EVALSHA, FCALL and
// their _RO forms) declares, and whether the line is such a call.
func (l MonitorLine) DeclaredKeys() ([]string, bool) {
	switch l.Command() {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
	default:
		return nil, false
	}
	if len(l.Args) < 3 {
		return nil, true
	}
	n, err := strconv.Atoi(l.Args[2])
	if err != nil || n < 0 || 3+n > len(l.Args) {
		return nil, true
	}
	return l.Args[3 : 3+n], true
}

// Keys asks Redis (COMMAND GETKEYS, through c) which of the command's
// arguments are keys. A command without keys (TIME) has none.
func (l MonitorLine) Keys(ctx context.Context, c redis.Cmdable) ([]string, error) {
	if len(l.Args) < 2 {
		return nil, nil // no arguments, no keys (and Redis 7.0 refuses COMMAND GETKEYS of a bare name)
	}
	args := make([]any, len(l.Args))
	for i, a := range l.Args {
		args[i] = a
	}
	keys, err := c.CommandGetKeys(ctx, args...).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no key arguments") {
			return nil, nil
		}
		return nil, fmt.Errorf("COMMAND GETKEYS %v: %w", l.Args, err)
	}
	return keys, nil
}

// Undeclared is a key a script command touched that its script call did
// not declare.
type Undeclared struct {
	// Call is the script call (EVALSHA, FCALL, ...), Command the command
	// it ran, Key the key of Command missing from Call's keys.
	Call, Command MonitorLine
	Key           string
}

func (u Undeclared) String() string {
	return fmt.Sprintf("%s ran %s, touching %q, which it did not declare", short(u.Call.Args, 6), short(u.Command.Args, 6), u.Key)
}

// short quotes at most n arguments, each cut at 80 bytes.
func short(args []string, n int) string {
	var b strings.Builder
	for i, a := range args {
		if i == n {
			b.WriteString(" ...")
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		if len(a) > 80 {
			a = a[:80] + "..."
		}
		b.WriteString(strconv.Quote(a))
	}
	return b.String()
}

// UndeclaredKeys checks, for lines MONITOR printed on one server, that
// every key each command run from a script touches (COMMAND GETKEYS,
// asked through c) is among the keys of the script call that ran it: the
// client's EVAL/EVALSHA/FCALL line MONITOR printed just before the
// script's own commands. It returns the keys that are not, and how many
// script calls and script commands it checked.
func UndeclaredKeys(ctx context.Context, c redis.Cmdable, lines []MonitorLine) (bad []Undeclared, calls, commands int, err error) {
	var call MonitorLine
	declared := map[string]bool{}
	inCall := false
	for _, l := range lines {
		if !l.FromScript() {
			keys, ok := l.DeclaredKeys()
			inCall = ok
			if ok {
				calls++
				call = l
				clear(declared)
				for _, k := range keys {
					declared[k] = true
				}
			}
			continue
		}
		commands++
		if !inCall {
			return bad, calls, commands, fmt.Errorf("script command %q without a script call before it", l.Args)
		}
		keys, err := l.Keys(ctx, c)
		if err != nil {
			return bad, calls, commands, err
		}
		for _, k := range keys {
			if !declared[k] {
				bad = append(bad, Undeclared{Call: call, Command: l, Key: k})
			}
		}
	}
	return bad, calls, commands, nil
}

// ParseMonitorLine reads one line of MONITOR's output:
//
//	1700000000.123456 [0 127.0.0.1:4242] "evalsha" "ab12..." "1" "key"
//	1700000000.123470 [0 lua] "incrby" "key" "1"
//
// Arguments are unquoted as Redis quotes them (\\, \", \n, \r, \t, \a,
// \b, \xHH).
func ParseMonitorLine(s string) (MonitorLine, error) {
	s = strings.TrimRight(s, "\r\n")
	s = strings.TrimPrefix(s, "+")
	open := strings.IndexByte(s, '[')
	end := strings.IndexByte(s, ']')
	if open < 0 || end < open {
		return MonitorLine{}, fmt.Errorf("MONITOR line %q: no [db source]", s)
	}
	_, source, ok := strings.Cut(s[open+1:end], " ")
	if !ok {
		return MonitorLine{}, fmt.Errorf("MONITOR line %q: no source", s)
	}
	l := MonitorLine{Source: source}
	rest := s[end+1:]
	for {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			return l, nil
		}
		if rest[0] != '"' {
			return MonitorLine{}, fmt.Errorf("MONITOR line %q: argument not quoted at %q", s, rest)
		}
		var b strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			c := rest[i]
			if c != '\\' || i+1 >= len(rest) {
				b.WriteByte(c)
				continue
			}
			i++
			switch rest[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 >= len(rest) {
					return MonitorLine{}, fmt.Errorf("MONITOR line %q: short \\x escape", s)
				}
				v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
				if err != nil {
					return MonitorLine{}, fmt.Errorf("MONITOR line %q: bad \\x escape: %w", s, err)
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(rest[i])
			}
		}
		if i >= len(rest) {
			return MonitorLine{}, fmt.Errorf("MONITOR line %q: unterminated argument", s)
		}
		l.Args = append(l.Args, b.String())
		rest = rest[i+1:]
	}
}

// Monitor is a MONITOR connection to one server: it records every line
// until Stop.
type Monitor struct {
	conn net.Conn
	done chan struct{}

	mu    sync.Mutex
	lines []MonitorLine
	err   error
}

// StartMonitor opens a MONITOR connection to addr (password may be empty)
// and records what it prints; t's cleanup closes it.
func StartMonitor(t testing.TB, addr, password string) *Monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("MONITOR %s: %v", addr, err)
	}
	r := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if password != "" {
		if _, err := fmt.Fprintf(conn, "AUTH %s\r\n", password); err != nil {
			t.Fatal(err)
		}
		if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
			t.Fatalf("MONITOR %s: AUTH: %q, %v", addr, l, err)
		}
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR %s: %q, %v", addr, l, err)
	}
	_ = conn.SetDeadline(time.Time{})
	m := &Monitor{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			s, err := r.ReadString('\n')
			if err != nil {
				return
			}
			l, err := ParseMonitorLine(s)
			m.mu.Lock()
			if err != nil && m.err == nil {
				m.err = err
			}
			if err == nil {
				m.lines = append(m.lines, l)
			}
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.Stop() })
	return m
}

// Sync waits until the monitor has printed the lines of every command
// sent before it: it sends ECHO with a unique marker through c, a client
// of the same server, and waits (up to 10s) for that line.
func (m *Monitor) Sync(t testing.TB, c redis.Cmdable) {
	t.Helper()
	marker := fmt.Sprintf("redistest-monitor-sync-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Echo(ctx, marker).Err(); err != nil {
		t.Fatalf("ECHO: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		for i := len(m.lines) - 1; i >= 0; i-- {
			if l := m.lines[i]; l.Command() == "echo" && len(l.Args) == 2 && l.Args[1] == marker {
				m.mu.Unlock()
				return
			}
		}
		m.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("MONITOR never printed the ECHO marker")
		}
		time.Sleep(pollEvery)
	}
}

// Take returns the lines recorded since the last Take and forgets them; a
// line MONITOR printed that could not be parsed fails t.
func (m *Monitor) Take(t testing.TB) []MonitorLine {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		t.Fatal(m.err)
	}
	out := m.lines
	m.lines = nil
	return out
}

// Stop closes the connection and waits for the reader to end.
func (m *Monitor) Stop() {
	_ = m.conn.Close()
	<-m.done
}
