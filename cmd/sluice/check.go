package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// descriptorList is check's descriptors, built flag by flag in order:
// --descriptor "k=v,k2=v2" starts a new descriptor; --entry k=v adds one
// entry (its value may hold ',' and '=') to the last descriptor, starting
// one if there is none; --descriptor-hits and --limit apply to the last
// descriptor.
type descriptorList []*ratelimitv3.RateLimitDescriptor

func (l *descriptorList) String() string { return fmt.Sprint(len(*l), " descriptors") }

// last returns the last descriptor, or an error naming flag when there is
// none.
func (l *descriptorList) last(flag string) (*ratelimitv3.RateLimitDescriptor, error) {
	if len(*l) == 0 {
		return nil, fmt.Errorf("%s must follow a --descriptor or --entry", flag)
	}
	return (*l)[len(*l)-1], nil
}

// descriptorFlag is --descriptor.
type descriptorFlag struct{ l *descriptorList }

func (f descriptorFlag) String() string { return "" }

// Set parses "k=v,k2=v2" into a new descriptor. A value may hold '=' (the
// first one splits) but not ',' (use --entry). An empty string starts an
// empty descriptor for --entry to fill.
func (f descriptorFlag) Set(v string) error {
	d := &ratelimitv3.RateLimitDescriptor{}
	if v != "" {
		for _, kv := range strings.Split(v, ",") {
			e, err := parseEntry(kv)
			if err != nil {
				return fmt.Errorf("%w (a value holding a comma needs --entry)", err)
			}
			d.Entries = append(d.Entries, e)
		}
	}
	*f.l = append(*f.l, d)
	return nil
}

// entryFlag is --entry.
type entryFlag struct{ l *descriptorList }

func (f entryFlag) String() string { return "" }

func (f entryFlag) Set(v string) error {
	e, err := parseEntry(v)
	if err != nil {
		return err
	}
	if len(*f.l) == 0 {
		*f.l = append(*f.l, &ratelimitv3.RateLimitDescriptor{})
	}
	d := (*f.l)[len(*f.l)-1]
	d.Entries = append(d.Entries, e)
	return nil
}

func parseEntry(kv string) (*ratelimitv3.RateLimitDescriptor_Entry, error) {
	k, val, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return nil, fmt.Errorf("entry %q is not key=value", kv)
	}
	return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: val}, nil
}

// lastDescriptorFlag is a flag that sets something on the descriptor the
// last --descriptor started: name is the flag (for the error when none
// did), set parses the value into that descriptor.
type lastDescriptorFlag struct {
	l    *descriptorList
	name string
	set  func(d *ratelimitv3.RateLimitDescriptor, v string) error
}

func (f lastDescriptorFlag) String() string { return "" }

func (f lastDescriptorFlag) Set(v string) error {
	d, err := f.l.last(f.name)
	if err != nil {
		return err
	}
	return f.set(d, v)
}

// setHits is --descriptor-hits: the descriptor's hits_addend.
func setHits(d *ratelimitv3.RateLimitDescriptor, v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", v)
	}
	d.HitsAddend = wrapperspb.UInt64(n)
	return nil
}

// setLimit is --limit: the descriptor's limit override, parsed from
// REQUESTS/[MULTIPLIER]UNIT: 10/minute, 100/5minute.
func setLimit(d *ratelimitv3.RateLimitDescriptor, v string) error {
	n, per, ok := strings.Cut(v, "/")
	if !ok {
		return fmt.Errorf("%q is not REQUESTS/UNIT (e.g. 10/minute or 100/5minute)", v)
	}
	reqs, err := strconv.ParseUint(n, 10, 32)
	if err != nil {
		return fmt.Errorf("%q: requests %q is not a 32-bit whole number", v, n)
	}
	digits := strings.IndexFunc(per, func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		return fmt.Errorf("%q: no unit after the multiplier", v)
	}
	mult := uint64(1)
	if digits > 0 {
		if mult, err = strconv.ParseUint(per[:digits], 10, 32); err != nil || mult == 0 {
			return fmt.Errorf("%q: multiplier %q is not a positive 32-bit number", v, per[:digits])
		}
	}
	unit, ok := rlv3.RateLimitUnit_value[strings.ToUpper(per[digits:])]
	if !ok || unit == 0 {
		return fmt.Errorf("%q: unit %q is not second, minute, hour, day, week, month or year", v, per[digits:])
	}
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(reqs), Unit: rlv3.RateLimitUnit(unit)}
	if mult > 1 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(uint32(mult))
	}
	return nil
}

// Exit codes of check, for scripts.
const (
	checkOK        = 0 // the server answered OK
	checkOverLimit = 1 // the server answered OVER_LIMIT
	checkError     = 2 // bad usage, no answer, or an UNKNOWN overall code
)

// check sends one ShouldRateLimit and prints the response. It exits 0 when
// the overall code is OK, 1 when it is OVER_LIMIT and 2 on any error.
func check(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice check", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC address of the server")
	domain := fs.String("domain", "", "rate-limit domain (required)")
	var descs descriptorList
	fs.Var(descriptorFlag{&descs}, "descriptor", "start a descriptor with entries key=value,key2=value2 (repeatable)")
	fs.Var(entryFlag{&descs}, "entry", "add one entry key=value to the last descriptor; the value may hold commas (repeatable)")
	fs.Var(lastDescriptorFlag{&descs, "--descriptor-hits", setHits}, "descriptor-hits", "hits_addend of the last descriptor (0: a peek, nothing consumed)")
	fs.Var(lastDescriptorFlag{&descs, "--limit", setLimit}, "limit", "limit override of the last descriptor: REQUESTS/[MULTIPLIER]UNIT, e.g. 10/minute")
	hits := fs.Uint("hits", 0, "hits_addend of the request (0: the server's default, 1)")
	asJSON := fs.Bool("json", false, "print the response as proto3 JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the call")
	useTLS := fs.Bool("tls", false, "connect with TLS")
	caFile := fs.String("tls-ca", "", "CA file to verify the server (default: the system roots); implies --tls")
	certFile := fs.String("tls-cert", "", "client certificate file, for mTLS; implies --tls")
	keyFile := fs.String("tls-key", "", "client key file, for mTLS")
	serverName := fs.String("tls-server-name", "", "server name to verify (default: the host of --addr)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice check --domain D --descriptor k=v[,k2=v2] [--entry k=v,with,commas] [--descriptor ...] [flags]\n\n"+
			"Exit code: 0 OK, 1 OVER_LIMIT, 2 error.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return checkOK
		}
		fmt.Fprintf(stderr, "sluice check: %v\n", err)
		return checkError
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "sluice check: unexpected arguments %q\n", fs.Args())
		return checkError
	case *domain == "":
		fmt.Fprintln(stderr, "sluice check: --domain is required")
		return checkError
	case len(descs) == 0:
		fmt.Fprintln(stderr, "sluice check: at least one --descriptor or --entry is required")
		return checkError
	case *hits > 1<<32-1:
		fmt.Fprintf(stderr, "sluice check: --hits %d does not fit in 32 bits\n", *hits)
		return checkError
	}
	for i, d := range descs {
		if len(d.Entries) == 0 {
			fmt.Fprintf(stderr, "sluice check: descriptor %d has no entry\n", i+1)
			return checkError
		}
	}

	creds := insecure.NewCredentials()
	if *useTLS || *caFile != "" || *certFile != "" {
		cfg, err := clientTLS(*caFile, *certFile, *keyFile, *serverName)
		if err != nil {
			fmt.Fprintf(stderr, "sluice check: %v\n", err)
			return checkError
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(stderr, "sluice check: %v\n", err)
		return checkError
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: descs, HitsAddend: uint32(*hits)}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		fmt.Fprintf(stderr, "sluice check: ShouldRateLimit on %s: %v\n", *addr, err)
		return checkError
	}
	if *asJSON {
		out, err := protojson.MarshalOptions{Multiline: true}.Marshal(resp)
		if err != nil {
			fmt.Fprintf(stderr, "sluice check: encode response: %v\n", err)
			return checkError
		}
		fmt.Fprintln(stdout, string(out))
	} else {
		printResponse(stdout, req, resp)
	}
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		return checkOK
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return checkOverLimit
	}
	fmt.Fprintf(stderr, "sluice check: overall code %s\n", resp.GetOverallCode())
	return checkError
}

// printResponse writes resp for a person: the overall code, one line per
// descriptor, then the headers and metadata the server added.
func printResponse(w io.Writer, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) {
	fmt.Fprintf(w, "overall: %s\n", resp.GetOverallCode())
	for i, st := range resp.GetStatuses() {
		var entries []string
		if i < len(req.Descriptors) {
			for _, e := range req.Descriptors[i].Entries {
				entries = append(entries, e.Key+"="+e.Value)
			}
		}
		fmt.Fprintf(w, "  [%d] %s: %s", i+1, strings.Join(entries, ","), st.GetCode())
		if l := st.GetCurrentLimit(); l != nil {
			fmt.Fprintf(w, "  limit %d per %s", l.GetRequestsPerUnit(), period(l))
			if l.GetName() != "" {
				fmt.Fprintf(w, " (%s)", l.GetName())
			}
			fmt.Fprintf(w, "  remaining %d", st.GetLimitRemaining())
			if r := st.GetDurationUntilReset(); r != nil {
				fmt.Fprintf(w, "  reset in %v", r.AsDuration())
			}
		} else if st.GetLimitRemaining() == 1<<32-1 {
			fmt.Fprint(w, "  unlimited")
		} else {
			fmt.Fprint(w, "  no limit")
		}
		fmt.Fprintln(w)
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		fmt.Fprintf(w, "  header %s: %s\n", h.GetKey(), h.GetValue())
	}
	if md := resp.GetDynamicMetadata(); md != nil {
		fmt.Fprintf(w, "  dynamic metadata: %s\n", protojson.Format(md))
	}
}

// period formats a limit's period: "second", or "5 minute" with a multiplier.
func period(l *rlsv3.RateLimitResponse_RateLimit) string {
	unit := strings.ToLower(l.GetUnit().String())
	if m := l.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		return fmt.Sprintf("%d %ss", m.GetValue(), unit)
	}
	return unit
}

// clientTLS builds the client TLS config of check.
func clientTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read --tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
