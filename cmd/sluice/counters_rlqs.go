package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/sluice-rl/sluice/internal/admin"
)

// countersRLQS runs `sluice counters rlqs`: the Rate Limit Quota
// Service's buckets on the instance's open streams, and each Envoy's share
// of every rule. It exits 0 on success, 1 when the server answered with an
// error, 2 on bad usage.
func countersRLQS(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice counters rlqs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var af adminFlagSet
	af.define(fs, envMap(environ))
	domain := fs.String("domain", "", "only the buckets of this domain")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice counters rlqs: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	c, err := af.client()
	if err != nil {
		fmt.Fprintf(stderr, "sluice counters rlqs: %v\n", err)
		return exitUsage
	}
	var got admin.QuotaBuckets
	if err := c.do(ctx, http.MethodGet, "/api/v1/rlqs", nil, &got); err != nil {
		fmt.Fprintf(stderr, "sluice counters rlqs on %s: %v\n", af.addr, err)
		return exitError
	}
	if *domain != "" {
		kept := got.Buckets[:0]
		for _, b := range got.Buckets {
			if b.Domain == *domain {
				kept = append(kept, b)
			}
		}
		got.Buckets = kept
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(got)
		return exitOK
	}
	if len(got.Buckets) == 0 {
		fmt.Fprintln(stdout, "no Envoy reports a bucket")
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tBUCKET\tDESCRIPTOR\tDEMAND/S\tSHARES\tASSIGNMENT\tSTREAM")
	for _, b := range got.Buckets {
		var shares []string
		for _, r := range b.Rules {
			s := fmt.Sprintf("%s %d/%d (%d Envoys", r.Rule, r.Share, r.Limit, r.Members)
			if r.Used > 0 {
				s += fmt.Sprintf(", %d used", r.Used)
			}
			shares = append(shares, s+")")
		}
		desc := b.Descriptor
		if desc == "" {
			desc = "(unmatched)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\t%s\n", b.Domain, b.Bucket, desc, b.Rate, strings.Join(shares, "; "), b.Assignment, b.Stream)
	}
	_ = tw.Flush()
	return exitOK
}
