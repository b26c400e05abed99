// Package v1alpha1 holds Envoy AI Gateway's QuotaPolicy API types, copied
// byte for byte from github.com/envoyproxy/ai-gateway v1.1.0
// (api/v1alpha1/quota_policy.go and status.go, commit
// c217da8a539570ba3f6014a60c2687c29a945f1f), so that the example's
// QuotaPolicy is decoded strictly into AI Gateway's own types without
// requiring AI Gateway's module, whose requirements span the SDK of every
// model provider it speaks to. TestUpstreamCopy holds the two files to
// the upstream blobs.
package v1alpha1
