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
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

// descriptorList is the repeatable --descriptor flag: "k=v,k2=v2" each.
type descriptorList []*ratelimitv3.RateLimitDescriptor

func (l *descriptorList) String() string { return fmt.Sprint(len(*l), " descriptors") }

// Set parses "k=v,k2=v2". A value may hold '=' (the first one splits) but
// not ','.
func (l *descriptorList) Set(v string) error {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("entry %q is not key=value", kv)
		}
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: val})
	}
	*l = append(*l, d)
	return nil
}

// check sends one ShouldRateLimit and prints the response. It exits 0
// whenever the server answered, whatever the overall code.
func check(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC address of the server")
	domain := fs.String("domain", "", "rate-limit domain (required)")
	var descs descriptorList
	fs.Var(&descs, "descriptor", "descriptor entries key=value,key2=value2 (required; repeatable)")
	hits := fs.Uint("hits", 0, "hits_addend of the request (0: the server's default, 1)")
	asJSON := fs.Bool("json", false, "print the response as proto3 JSON")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of the call")
	useTLS := fs.Bool("tls", false, "connect with TLS")
	caFile := fs.String("tls-ca", "", "CA file to verify the server (default: the system roots); implies --tls")
	certFile := fs.String("tls-cert", "", "client certificate file, for mTLS; implies --tls")
	keyFile := fs.String("tls-key", "", "client key file, for mTLS")
	serverName := fs.String("tls-server-name", "", "server name to verify (default: the host of --addr)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice check --domain D --descriptor k=v[,k2=v2] [--descriptor ...] [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "sluice check: unexpected arguments %q\n", fs.Args())
		return exitUsage
	case *domain == "":
		fmt.Fprintln(stderr, "sluice check: --domain is required")
		return exitUsage
	case len(descs) == 0:
		fmt.Fprintln(stderr, "sluice check: at least one --descriptor is required")
		return exitUsage
	case *hits > 1<<32-1:
		fmt.Fprintf(stderr, "sluice check: --hits %d does not fit in 32 bits\n", *hits)
		return exitUsage
	}

	creds := insecure.NewCredentials()
	if *useTLS || *caFile != "" || *certFile != "" {
		cfg, err := clientTLS(*caFile, *certFile, *keyFile, *serverName)
		if err != nil {
			fmt.Fprintf(stderr, "sluice check: %v\n", err)
			return exitUsage
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(stderr, "sluice check: %v\n", err)
		return exitUsage
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: descs, HitsAddend: uint32(*hits)}
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil {
		fmt.Fprintf(stderr, "sluice check: ShouldRateLimit on %s: %v\n", *addr, err)
		return exitError
	}
	if *asJSON {
		out, err := protojson.MarshalOptions{Multiline: true}.Marshal(resp)
		if err != nil {
			fmt.Fprintf(stderr, "sluice check: encode response: %v\n", err)
			return exitError
		}
		fmt.Fprintln(stdout, string(out))
		return exitOK
	}
	printResponse(stdout, req, resp)
	return exitOK
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
