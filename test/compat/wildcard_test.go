package compat

import (
	"path/filepath"
	"strings"
	"testing"
)

// devStarKey: a '*' in a config key is a literal character in sluice; the
// incumbent matches such a key as a wildcard over the request's key and
// value joined by '_'.
var devStarKey = dev("star-key-literal")

// TestWildcards is the incumbent's TestWildcardConfig (test/config,
// wildcard.yaml: trailing, middle and multiple '*', nested wildcards, no
// eager match of plain values), and what it answers beyond it
// (wildcard_order.yaml, checked against the incumbent's binary): the first
// matching wildcard in file order wins over later ones and over the
// key-only descriptor, a value "*" matches an empty value, and a key
// holding '*' (star-key-literal).
func TestWildcards(t *testing.T) {
	type entry struct{ key, value string }
	minute := func(n uint32) answer { return ans(ok, limited(ok, n, "MINUTE", n-1)) }
	none := ans(ok, noLimit)
	cases := []struct {
		domain  string
		entries []entry
		want    answer
		alts    []alt[answer]
	}{
		{"test-domain", []entry{{"noVal", "foo1"}}, minute(20), nil},
		{"test-domain", []entry{{"noVal", "foo2"}}, minute(20), nil},
		{"test-domain", []entry{{"wild", "foo1"}}, minute(20), nil},
		{"test-domain", []entry{{"wild", "foo2"}}, minute(20), nil},
		{"test-domain", []entry{{"nestedWild", "val1"}, {"wild", "goo2"}}, minute(20), nil},
		{"test-domain", []entry{{"nestedWild", "val1"}, {"wild", "foo2"}}, none, nil},
		{"test-domain", []entry{{"wild", "bar"}}, none, nil},
		{"test-domain", []entry{{"noWild", "foo1"}}, none, nil},
		{"test-domain", []entry{{"midWild", "barab"}}, minute(20), nil},
		{"test-domain", []entry{{"midWild", "bar123b"}}, minute(20), nil},
		{"test-domain", []entry{{"midWild", "barb"}}, minute(20), nil},
		{"test-domain", []entry{{"midWild", "bara"}}, none, nil},
		{"test-domain", []entry{{"midWild", "xbarb"}}, none, nil},
		{"test-domain", []entry{{"multiWild", "foo123bar456baz"}}, minute(10), nil},
		{"test-domain", []entry{{"multiWild", "foobarbaz"}}, minute(10), nil},
		{"test-domain", []entry{{"multiWild", "foo123baz"}}, none, nil},
		{"test-domain", []entry{{"multiWild", "bar456baz"}}, none, nil},

		{"wildcard-order", []entry{{"k", "foobar"}}, minute(10), nil},
		{"wildcard-order", []entry{{"k", "fx"}}, minute(20), nil},
		{"wildcard-order", []entry{{"k", "f"}}, minute(20), nil},
		{"wildcard-order", []entry{{"k", "g"}}, minute(30), nil},
		{"wildcard-order", []entry{{"any", ""}}, minute(40), nil},
		{"wildcard-order", []entry{{"any", "anything"}}, minute(40), nil},
		{"wildcard-order", []entry{{"x*", ""}}, minute(70), nil},
		{"wildcard-order", []entry{{"x", "1"}}, minute(70), []alt[answer]{because(devStarKey, none)}},
		{"wildcard-order", []entry{{"xyz", "1"}}, minute(70), []alt[answer]{because(devStarKey, none)}},
	}
	for _, v := range []variant{memory, standalone} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, v, nil, "fixtures/wildcard.yaml", "fixtures/wildcard_order.yaml")
			for _, c := range cases {
				var kv []string
				for _, e := range c.entries {
					kv = append(kv, e.key, e.value)
				}
				// Each descriptor is asked once, so one ask sees a fresh
				// counter whatever the window.
				resp := s.ask(t, rq(c.domain, d(kv...)))
				expect(t, c.domain+" "+strings.Join(kv, "="), answerOf(resp), c.want, c.alts...)
			}
		})
	}

	// The difference is loud: validate names the key and what the
	// incumbent did with it.
	accepted, out := validate(t, nil, filepath.Join("testdata", "fixtures", "wildcard_order.yaml"))
	if !accepted {
		t.Fatalf("wildcard_order.yaml refused:\n%s", out)
	}
	if want := "wildcard_order.yaml:17: key 'x*' holds '*'"; !strings.Contains(out, want) {
		t.Errorf("validate does not warn %q:\n%s", want, out)
	}
}
