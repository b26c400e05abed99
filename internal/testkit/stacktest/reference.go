package stacktest

// ReferenceBasicYAML and ReferenceAnotherYAML are the configs of
// envoyproxy/ratelimit's own integration tests (basic.yaml and
// another.yaml), unchanged: the unit tests of internal/service and the
// black-box tests of test/integration replay its scenario on them.
const (
	ReferenceBasicYAML = `domain: basic
descriptors:
  - key: key1
    rate_limit:
      unit: second
      requests_per_unit: 50
  - key: one_per_minute
    rate_limit:
      unit: minute
      requests_per_unit: 1
`
	ReferenceAnotherYAML = `domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 20
`
)
