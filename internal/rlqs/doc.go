// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService,
// StreamRateLimitQuotas) beside ShouldRateLimit, on the same config and the
// same backends.
//
// Envoy's rate_limit_quota filter groups requests into buckets, enforces a
// quota assignment for each bucket locally (a token bucket, or allow-all /
// deny-all) and reports the bucket's usage on a long-lived stream. The
// service answers every report with an assignment per reported bucket:
//
//   - a bucket's BucketId entries are a descriptor, matched against the
//     domain's tree as ShouldRateLimit matches descriptors (Resolve says in
//     which order a map's keys are taken);
//   - for each rule of the matched node, the client's share of the rule's
//     limit follows its reported demand (allowed + denied over the time
//     elapsed), computed by the backend's QuotaStore so that the shares of
//     every client of every sluice instance reporting the bucket sum to at
//     most the limit;
//   - a window rule whose window is used up by all clients together denies
//     until the window's end; the tightest rule of a node binds;
//   - unmatched and unlimited buckets are allowed, never denied.
//
// It knows nothing of Redis: state goes through backend.QuotaStore.
package rlqs
