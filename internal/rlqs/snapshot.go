package rlqs

import (
	"slices"
	"strings"
	"time"
)

// BucketView is one bucket of one stream, as the admin API and page show
// it.
type BucketView struct {
	// Stream names the stream (the member its shares are kept under);
	// Domain is the stream's domain.
	Stream string `json:"stream"`
	Domain string `json:"domain"`
	// Bucket is the BucketId's entries, "k=v, k2=v2" in key order.
	Bucket string `json:"bucket"`
	// Descriptor is the matched node's path; empty when unmatched.
	Descriptor string `json:"descriptor"`
	// Rate is the bucket's reported demand on this stream (requests per
	// second, averaged).
	Rate float64 `json:"rate"`
	// Rules are the shares of the node's rules, in config order.
	Rules []RuleView `json:"rules,omitempty"`
	// Assignment is the last assignment sent ("allow_all", "deny_all",
	// "token_bucket N per Ss, max M").
	Assignment string `json:"assignment"`
	// LastReport is when the stream last reported the bucket.
	LastReport time.Time `json:"last_report"`
}

// RuleView is one rule's share of a bucket on one stream.
type RuleView struct {
	// Rule is the rule's name, or its text when it has none.
	Rule  string `json:"rule"`
	Limit uint64 `json:"limit"`
	// Share is the stream's share of Limit; Members how many streams
	// share it, Demand their summed demand (per period).
	Share   uint64  `json:"share"`
	Members int     `json:"members"`
	Demand  float64 `json:"demand"`
	// Used is what all streams used in the current window (window rules).
	Used uint64 `json:"used"`
}

// Snapshot lists every bucket of every open stream of this instance,
// sorted by domain, bucket and stream. Shares of other instances' streams
// are not listed, but their counts are in Members and Demand.
func (s *Service) Snapshot() []BucketView {
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	var out []BucketView
	for _, st := range streams {
		st.mu.Lock()
		for _, b := range st.buckets {
			v := BucketView{Stream: st.member, Domain: st.domain, Bucket: b.desc, Rate: b.rate, Assignment: b.last, LastReport: b.lastReport}
			if b.node != nil {
				v.Descriptor = b.node.Path()
			}
			for i, r := range b.rules {
				rv := RuleView{Rule: r.Name, Limit: r.Limit}
				if rv.Rule == "" {
					rv.Rule = r.String()
				}
				if i < len(b.shares) {
					sh := b.shares[i]
					rv.Share, rv.Members, rv.Demand, rv.Used = sh.Share, sh.Members, sh.Demand, sh.Used
				}
				v.Rules = append(v.Rules, rv)
			}
			out = append(out, v)
		}
		st.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b BucketView) int {
		return strings.Compare(a.Domain+"\x00"+a.Bucket+"\x00"+a.Stream, b.Domain+"\x00"+b.Bucket+"\x00"+b.Stream)
	})
	return out
}
