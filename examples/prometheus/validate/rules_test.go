// Package validate checks examples/prometheus and the Grafana dashboard with
// Prometheus's own Go packages: the rule file as `promtool check rules`
// reads it (model/rulefmt), every dashboard query through the PromQL
// parser, and the utilisation rule evaluated by the PromQL engine on
// series shaped as sluice exports them. It is a module of its own so that
// Prometheus's dependencies stay out of sluice's.
package validate

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
)

const (
	rulesFile     = "../sluice-rules.yaml"
	dashboardFile = "../../grafana/sluice-dashboard.json"
	utilisation   = "sluice:rule_utilisation:ratio_rate5m"
)

// loadRules parses the rule file as Prometheus does, failing on any error.
func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	return groups
}

// TestRulesParse reads the rule file with rulefmt (unknown fields
// rejected), which also parses every expression and annotation template,
// and checks the rules the docs name are there.
func TestRulesParse(t *testing.T) {
	groups := loadRules(t)
	have := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			have[r.Record+r.Alert] = true
		}
	}
	for _, name := range []string{utilisation, "SluiceRuleNearLimit", "SluiceRequestsRefused", "SluiceBackendFailing"} {
		if !have[name] {
			t.Errorf("%s has no rule %s", rulesFile, name)
		}
	}
}

// TestRulesRejectBroken proves the check bites: a broken variant of the
// file fails to parse.
func TestRulesRejectBroken(t *testing.T) {
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	for name, broken := range map[string]string{
		"bad PromQL":     strings.Replace(string(data), "group_right", "group_rigth", 1),
		"unknown field":  strings.Replace(string(data), "    rules:", "    rulez:", 1),
		"bad template":   strings.Replace(string(data), "{{ $labels.rule }}", "{{ $labels.rule ", 1),
		"no expression":  strings.Replace(string(data), "expr: sluice:rule_utilisation:ratio_rate5m > 0.8", "expr: ''", 1),
		"bad for period": strings.Replace(string(data), "for: 10m", "for: ten minutes", 1),
	} {
		if broken == string(data) {
			t.Fatalf("%s: the variant changed nothing", name)
		}
		if _, errs := rulefmt.Parse([]byte(broken), false, model.UTF8Validation, p, slog.New(slog.DiscardHandler)); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestDashboardQueriesParse parses every query of the Grafana dashboard
// with the PromQL parser, Grafana's interval variables replaced by a
// duration as Grafana does before sending it.
func TestDashboardQueriesParse(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	p := parser.NewParser(parser.Options{})
	r := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	n := 0
	for _, panel := range dash.Panels {
		for _, tg := range panel.Targets {
			n++
			if _, err := p.ParseExpr(r.Replace(tg.Expr)); err != nil {
				t.Errorf("panel %q: %v\n%s", panel.Title, err, tg.Expr)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d queries", n)
	}
}

// ruleExpr returns the expression of the rule recording or alerting name.
func ruleExpr(t *testing.T, groups *rulefmt.RuleGroups, name string) string {
	t.Helper()
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record == name || r.Alert == name {
				return strings.TrimSpace(r.Expr)
			}
		}
	}
	t.Fatalf("no rule %s", name)
	return ""
}

// TestUtilisationEvaluates runs the utilisation rule and its alert in the
// PromQL engine on two instances' series: admitted cost summed over the
// instances, each configured rule's limit per second counted once, rules
// of limit 0 left out, the alert firing only above 80%.
func TestUtilisationEvaluates(t *testing.T) {
	groups := loadRules(t)
	rec := ruleExpr(t, groups, utilisation)
	alert := strings.Replace(ruleExpr(t, groups, "SluiceRuleNearLimit"), utilisation, "("+rec+")", 1)
	series := func(inst string) string {
		var b strings.Builder
		// Node x: 30 + 18 admitted a minute over both instances: 0.8/s.
		// Node y: 54 a minute on one instance: 0.9/s.
		fmt.Fprintf(&b, "  sluice_rate_limit_within_limit_total{instance=%q,domain=\"api\",descriptor=\"generic_key_x\"} 0+%dx10\n", inst, map[string]int{"a": 30, "b": 18}[inst])
		if inst == "a" {
			fmt.Fprintf(&b, "  sluice_rate_limit_within_limit_total{instance=%q,domain=\"api\",descriptor=\"generic_key_y\"} 0+54x10\n", inst)
		}
		for _, r := range []struct {
			desc, rule, alg, unit string
			limit, window         int
		}{
			{"generic_key_x", "per_minute", "fixed_window", "minute", 100, 60},
			{"generic_key_x", "me.0", "token_bucket", "second", 2, 1},
			{"generic_key_x", "closed", "fixed_window", "hour", 0, 3600},
			{"generic_key_y", "per_minute", "sliding_window", "minute", 60, 60},
		} {
			l := fmt.Sprintf("instance=%q,domain=\"api\",descriptor=%q,rule=%q,algorithm=%q,unit=%q", inst, r.desc, r.rule, r.alg, r.unit)
			fmt.Fprintf(&b, "  sluice_rule_limit{%s} %dx10\n  sluice_rule_window_seconds{%s} %dx10\n", l, r.limit, l, r.window)
		}
		return b.String()
	}
	input := "load 1m\n" + series("a") + series("b") + `
eval instant at 10m ` + oneLine(rec) + `
  {domain="api",descriptor="generic_key_x",rule="per_minute",algorithm="fixed_window",unit="minute"} 0.48
  {domain="api",descriptor="generic_key_x",rule="me.0",algorithm="token_bucket",unit="second"} 0.4
  {domain="api",descriptor="generic_key_y",rule="per_minute",algorithm="sliding_window",unit="minute"} 0.9

eval instant at 10m ` + oneLine(alert) + `
  {domain="api",descriptor="generic_key_y",rule="per_minute",algorithm="sliding_window",unit="minute"} 0.9
`
	promqltest.RunTest(t, input, promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery))
}

// oneLine joins a multi-line expression for the promqltest script.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
