package descriptor_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// A config source other than YAML (an xDS resource, say) fills DomainSpecs
// and compiles them; errors name the resource and the field path.
func ExampleCompile() {
	spec := descriptor.DomainSpec{
		Name: "api",
		At:   descriptor.Pos{Source: "RateLimitConfig api-limits"},
		Descriptors: []descriptor.DescriptorSpec{{
			Key:        "user",
			RateLimits: []descriptor.RuleSpec{{Unit: "minute", RequestsPerUnit: 100}},
		}, {
			Key:        "path",
			RateLimits: []descriptor.RuleSpec{{Unit: "fortnight"}},
		}},
	}
	if _, err := descriptor.Compile(spec); err != nil {
		fmt.Println(err)
	}
	spec.Descriptors = spec.Descriptors[:1]
	d, _ := descriptor.Compile(spec)
	cfg, _ := descriptor.NewConfig(d)
	n := cfg.Domain("api").Match([]descriptor.Entry{{Key: "user", Value: "alice"}})
	fmt.Println(n.Rules[0].Limit, n.Rules[0].Unit)
	// Output:
	// RateLimitConfig api-limits: descriptors[1].rate_limit.unit: invalid rate limit unit 'fortnight' (want second, minute, hour, day, week, month or year)
	// 100 minute
}
