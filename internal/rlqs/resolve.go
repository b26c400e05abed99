package rlqs

import (
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/identity"
)

// Resolve maps a BucketId's entries, a map with no order, onto a node of
// domain's tree. The order is the tree's: starting at the top level, the
// next entry is the first of the remaining keys, in byte order, that the
// tree matches at that depth (with the entries placed so far: exact value,
// wildcard or key-only default, as ShouldRateLimit matches); there is no
// backtracking. The bucket matches when every one of its entries is placed;
// the node reached is then the one ShouldRateLimit would apply to the
// descriptor of those entries in that order. Otherwise, or when the domain
// is nil, Resolve returns a nil node.
//
// The entries returned are the ordered descriptor (nil without a match).
func Resolve(domain *descriptor.Domain, bucket map[string]string) (*descriptor.Node, []descriptor.Entry) {
	if domain == nil || len(bucket) == 0 || len(bucket) > domain.Depth() {
		return nil, nil
	}
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	entries := make([]descriptor.Entry, 0, len(keys))
	var node *descriptor.Node
	for len(keys) > 0 {
		placed := -1
		for i, k := range keys {
			if n := domain.Match(append(entries, descriptor.Entry{Key: k, Value: bucket[k]})); n != nil {
				placed, node = i, n
				break
			}
		}
		if placed < 0 {
			return nil, nil
		}
		entries = append(entries, descriptor.Entry{Key: keys[placed], Value: bucket[keys[placed]]})
		keys = slices.Delete(keys, placed, placed+1)
	}
	return node, entries
}

// bucketKey is a canonical name of a bucket's entries (sorted by key, each
// part length-prefixed by pkg/identity's encoding, so no two maps share
// one), for the stream's own map of buckets.
func bucketKey(bucket map[string]string) string {
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	entries := make([]identity.Entry, len(keys))
	for i, k := range keys {
		entries[i] = identity.Entry{Key: k, Value: bucket[k]}
	}
	return identity.Encode("", entries)
}

// describe writes a bucket's entries as "k=v, k2=v2" in key order, for
// logs and the admin view.
func describe(bucket map[string]string) string {
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k + "=" + bucket[k])
	}
	return b.String()
}

// stateIdentity is the identity the bucket's quota state is kept under:
// the domain and ordered entries, with the value of every level whose node
// has share_threshold replaced by the node's pattern (so every matching
// value shares one quota, as in ShouldRateLimit).
func stateIdentity(domain string, node *descriptor.Node, entries []descriptor.Entry) string {
	ids := slices.Clone(entries)
	for x := node; x != nil; x = x.Parent {
		if x.ShareThreshold && x.Depth >= 1 && x.Depth <= len(ids) {
			ids[x.Depth-1].Value = x.Value
		}
	}
	return identity.Encode(domain, ids)
}
