package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/internal/admin"
)

// entryList collects descriptor entries from the repeatable --entry k=v
// (the value is everything after the first '=', commas included) and
// --descriptor k=v,k2=v2 (split on commas: for values without one).
type entryList struct{ entries []admin.Entry }

func (l *entryList) String() string { return fmt.Sprint(len(l.entries), " entries") }

func (l *entryList) entry() flag.Value { return entryValue{l} }

func (l *entryList) descriptor() flag.Value { return descriptorValue{l} }

type entryValue struct{ l *entryList }

func (v entryValue) String() string { return "" }

// Set takes one "key=value"; the value may hold ',' and '='.
func (v entryValue) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("entry %q is not key=value", s)
	}
	v.l.entries = append(v.l.entries, admin.Entry{Key: k, Value: val})
	return nil
}

type descriptorValue struct{ l *entryList }

func (v descriptorValue) String() string { return "" }

// Set takes "k=v,k2=v2" and appends its entries.
func (v descriptorValue) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		if err := (entryValue{v.l}).Set(kv); err != nil {
			return fmt.Errorf("%w (a value holding a comma needs --entry)", err)
		}
	}
	return nil
}

// adminClient reaches the admin listener over HTTP(S).
type adminClient struct {
	base     string
	http     *http.Client
	token    string
	operator string
}

// adminFlagSet holds the flags every admin client command shares.
type adminFlagSet struct {
	addr, tokenFile, operator string
	useTLS                    bool
	ca, cert, key, serverName string
	timeout                   time.Duration
}

func (a *adminFlagSet) define(fs *flag.FlagSet, env map[string]string) {
	fs.StringVar(&a.addr, "admin-addr", cmp.Or(env["SLUICE_ADMIN_ADDR"], admin.DefaultAddr), "admin listener address (env SLUICE_ADMIN_ADDR)")
	fs.StringVar(&a.tokenFile, "token-file", env["SLUICE_ADMIN_TOKEN_FILE"], "file holding the admin bearer token (env SLUICE_ADMIN_TOKEN_FILE)")
	fs.StringVar(&a.operator, "as", cmp.Or(env["USER"], env["LOGNAME"]), "who is asking, written to the server's audit log (default $USER)")
	fs.BoolVar(&a.useTLS, "tls", false, "connect with TLS")
	fs.StringVar(&a.ca, "tls-ca", "", "CA file to verify the admin listener; implies --tls")
	fs.StringVar(&a.cert, "tls-cert", "", "client certificate file, for mTLS; implies --tls")
	fs.StringVar(&a.key, "tls-key", "", "client key file, for mTLS")
	fs.StringVar(&a.serverName, "tls-server-name", "", "server name to verify (default: the host of --admin-addr)")
	fs.DurationVar(&a.timeout, "timeout", 10*time.Second, "deadline of the call")
}

func (a *adminFlagSet) client() (*adminClient, error) {
	c := &adminClient{base: "http://" + a.addr, http: &http.Client{Timeout: a.timeout}, operator: a.operator}
	if a.useTLS || a.ca != "" || a.cert != "" {
		cfg, err := clientTLS(a.ca, a.cert, a.key, a.serverName)
		if err != nil {
			return nil, err
		}
		c.base = "https://" + a.addr
		c.http.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	if a.tokenFile != "" {
		b, err := os.ReadFile(a.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("read --token-file: %w", err)
		}
		c.token = strings.TrimSpace(string(b))
	}
	return c, nil
}

// do sends a request and decodes a 200 answer into out; any other status
// is an error carrying the server's message.
func (c *adminClient) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", "sluice-counters/"+version)
	if c.operator != "" {
		req.Header.Set("X-Sluice-Operator", c.operator)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Error)
		}
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

const countersUsage = `Usage:
  sluice counters get   --domain D (--entry k=v ... | --descriptor k=v,k2=v2) [flags]
  sluice counters reset --domain D (--entry k=v ... | --descriptor k=v,k2=v2) [--rule NAME] [flags]
  sluice counters rlqs  [--domain D] [flags]

get shows the config node the descriptor matches and, for every rule, what is
used, what remains and when it resets, without consuming anything. reset
forgets the descriptor's state (every rule, or --rule's) on the backend and in
this instance's denial cache. Both are written to the server's audit log.
rlqs lists the Rate Limit Quota Service's buckets on the instance's open
streams: each Envoy's demand, its share of every rule, its last assignment.
They talk to the admin listener (SLUICE_ADMIN_ADDR, default 127.0.0.1:6070).

`

// counters runs `sluice counters get|reset`. It exits 0 on success, 1 when
// the server answered with an error, 2 on bad usage.
func counters(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "rlqs" {
		return countersRLQS(ctx, args[1:], environ, stdout, stderr)
	}
	if len(args) == 0 || (args[0] != "get" && args[0] != "reset") {
		fmt.Fprint(stderr, countersUsage)
		if len(args) > 0 && (args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
			return exitOK
		}
		return exitUsage
	}
	sub := args[0]
	fs := flag.NewFlagSet("sluice counters "+sub, flag.ContinueOnError)
	var af adminFlagSet
	af.define(fs, envMap(environ))
	domain := fs.String("domain", "", "rate-limit domain (required)")
	var entries entryList
	fs.Var(entries.entry(), "entry", "one descriptor entry key=value, in order; the value may hold commas (repeatable)")
	fs.Var(entries.descriptor(), "descriptor", "descriptor entries key=value,key2=value2 (values without commas)")
	rule := ""
	if sub == "reset" {
		fs.StringVar(&rule, "rule", "", "reset only the rule of this name (or rule id); default every rule")
	}
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), countersUsage)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "sluice counters %s: %v\n", sub, err)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "sluice counters %s: unexpected arguments %q\n", sub, fs.Args())
		return exitUsage
	case *domain == "":
		fmt.Fprintf(stderr, "sluice counters %s: --domain is required\n", sub)
		return exitUsage
	case len(entries.entries) == 0:
		fmt.Fprintf(stderr, "sluice counters %s: at least one --entry (or --descriptor) is required\n", sub)
		return exitUsage
	}
	c, err := af.client()
	if err != nil {
		fmt.Fprintf(stderr, "sluice counters %s: %v\n", sub, err)
		return exitUsage
	}
	var out any
	var got admin.Counters
	var reset admin.ResetResult
	if sub == "get" {
		q := url.Values{"domain": {*domain}}
		for _, e := range entries.entries {
			q.Add("entry", e.Key+"="+e.Value)
		}
		err, out = c.do(ctx, http.MethodGet, "/api/v1/counters?"+q.Encode(), nil, &got), &got
	} else {
		req := admin.ResetRequest{Domain: *domain, Entries: entries.entries, Rule: rule}
		err, out = c.do(ctx, http.MethodPost, "/api/v1/counters/reset", req, &reset), &reset
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice counters %s on %s: %v\n", sub, af.addr, err)
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(out)
		return exitOK
	}
	if sub == "reset" {
		fmt.Fprintf(stdout, "reset %s on %s %s\n", strings.Join(reset.Names, ", "), *domain, formatEntryList(entries.entries))
		if reset.After != nil {
			printCounters(stdout, reset.After)
		}
		return exitOK
	}
	printCounters(stdout, &got)
	return exitOK
}

// roundReset keeps a reset readable: milliseconds under a minute, seconds
// above.
func roundReset(d time.Duration) time.Duration {
	if d > time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func formatEntryList(es []admin.Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, ",")
}

// printCounters writes a lookup for people: the matched node, then one
// table row per rule.
func printCounters(w io.Writer, c *admin.Counters) {
	fmt.Fprintf(w, "domain %s  descriptor %s  (config %s)\n", c.Domain, formatEntryList(c.Entries), c.ConfigVersion)
	switch {
	case c.Matched == nil:
		fmt.Fprintln(w, "matched: nothing: no limit applies (answered OK)")
		return
	default:
		fmt.Fprintf(w, "matched: %s (%s:%d)\n", c.Matched.Path, c.Matched.File, c.Matched.Line)
	}
	if c.Unlimited {
		fmt.Fprintln(w, "unlimited: always OK")
		return
	}
	if len(c.Rules) == 0 {
		fmt.Fprintln(w, "no rules: answered OK")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tALGORITHM\tLIMIT\tUSED\tREMAINING\tRESET IN\t")
	for _, r := range c.Rules {
		name := cmp.Or(r.Name, r.ID)
		mark := ""
		if r.Binding {
			mark = "binding"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d per %s\t%d\t%d\t%s\t%s\n", name, r.Algorithm, r.Limit, r.Period, r.Used, r.Remaining,
			roundReset(time.Duration(r.ResetSeconds*float64(time.Second))), mark)
	}
	tw.Flush()
	for _, r := range c.Rules {
		fmt.Fprintf(w, "  %s: %s\n", cmp.Or(r.Name, r.ID), r.State)
	}
	if c.Allowed {
		fmt.Fprintln(w, "a request of cost 1 would be admitted now")
	} else {
		fmt.Fprintln(w, "a request of cost 1 would be OVER_LIMIT now")
	}
}
