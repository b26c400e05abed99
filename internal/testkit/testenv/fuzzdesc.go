// Package fuzzdesc holds the inputs the fuzz tests of descriptors share: a
// decoder of fuzz bytes into any domain, keys and values (length-prefixed
// strings, so any byte can appear anywhere), and a config with every kind
// of node to push arbitrary requests through. It knows nothing of how a
// descriptor is encoded, stored or decided.

package testenv

// FuzzDescriptor reads data as strings, each a length byte then that many bytes
// (fewer when data ends first): the domain, then keys and values in turn.
// A key that data ends after has the value "". Empty data is the empty
// domain with no entries.
func FuzzDescriptor(data []byte) (domain string, entries [][2]string) {
	next := func() (string, bool) {
		if len(data) == 0 {
			return "", false
		}
		n := min(int(data[0]), len(data)-1)
		s := string(data[1 : 1+n])
		data = data[1+n:]
		return s, true
	}
	domain, _ = next()
	for {
		k, ok := next()
		if !ok {
			return domain, entries
		}
		v, _ := next()
		entries = append(entries, [2]string{k, v})
	}
}

// EveryNodeYAML is a config (domain d) with every kind of node the service
// treats differently: several rules of every algorithm, a wildcard with
// share_threshold and replaces, shadow_mode with quota_mode, unlimited,
// metadata, a week's limit of 0. The fuzz tests of the service and the
// server push arbitrary requests through it.
const EveryNodeYAML = `
domain: d
descriptors:
  - key: a
    rate_limits:
      - {name: n1, unit: second, requests_per_unit: 3}
      - {name: n2, algorithm: token_bucket, unit: minute, requests_per_unit: 10, burst: 5}
      - {algorithm: sliding_window, unit: hour, requests_per_unit: 50}
      - {algorithm: sliding_log, unit: second, requests_per_unit: 2}
      - {algorithm: gcra, unit: day, requests_per_unit: 2, burst: 1}
    metadata: {x: 1}
    descriptors:
      - key: b
        value: v*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: n1}]}
  - key: b
    shadow_mode: true
    quota_mode: true
    rate_limit: {name: n3, algorithm: leaky_bucket, unit: second, requests_per_unit: 1}
  - key: c
    rate_limit: {unlimited: true}
  - key: z
    value: "0"
    rate_limit: {unit: week, requests_per_unit: 0}
`
