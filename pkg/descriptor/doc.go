// Package descriptor reads rate-limit configuration (envoyproxy/ratelimit's
// YAML format, plus sluice's extensions), validates it with file and line in
// every error, compiles it into a match tree, and matches request descriptors
// against it.
//
// # Stages
//
// A config goes through two stages, so that it can come from something
// other than YAML:
//
//  1. A source produces DomainSpecs: plain structs saying what it wrote,
//     with a Pos (file and line, or resource and field path) per value.
//     ReadYAML is the YAML source (yamlread.go walks the document,
//     yamlrules.go reads rate-limit maps, metadata.go converts metadata,
//     yamlerror.go puts syntax errors on their line, yamlnode.go holds the
//     typed reads and the alias guard). Another source (an xDS resource)
//     fills DomainSpecs itself.
//  2. Compile validates one DomainSpec and builds its match tree
//     (compile.go). It is the only place a config's meaning is checked.
//
// Parse is both stages for one YAML file; Load reads files and directories
// and joins their domains into a Config; NewConfig joins compiled domains.
//
// It knows nothing of backends, Redis or gRPC: it hands out Nodes carrying
// limit.Rules, and the service decides what to do with them. Nor does it
// know when a config changes: internal/reload watches the files and calls
// Load; the new Config is swapped in whole by internal/service's
// Service.SetConfig (an atomic pointer), wired in cmd/sluice/serve.go
// (loadFiles; cmd/sluice/xds.go for the xDS source). A bad config keeps the
// last good one. A matched descriptor's state is named by pkg/identity.
//
// # Format
//
// A file holds one domain (a later document of a YAML stream is ignored
// with a warning, as the reference reads only the first):
//
//	domain: api                 # required
//	failure_mode: error         # sluice: error (default), allow, deny or local
//	descriptors:
//	  - key: user               # required
//	    value: alice            # optional; '*' is a wildcard; absent = key-only default
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	    rate_limits:            # sluice: several rules instead of rate_limit
//	      - {name: burst, algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 30}
//	      - {unit: day, requests_per_unit: 10000, time_zone: Asia/Shanghai}
//	    descriptors: [...]      # nested, matched against the next entry
//	    shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold: bools
//	    charge_over_limit: bool # sluice: charge costs that do not fit (quota debits)
//	    metadata: {...}         # any map, returned in dynamic metadata
//
// A rule map takes unit, requests_per_unit, name, unlimited, replaces (the
// reference's keys) and algorithm, burst, unit_multiplier, time_zone
// (sluice's). Everything the reference accepts means the same here, and a
// file the reference loads loads here: what it ignores (a key it knows
// written where it means nothing, a key written twice, later documents) is
// ignored with a warning naming file and line (Config.Warnings), or refused
// with ReadOptions.Strict. Otherwise parsing is strict: unknown keys, wrong
// types, rules that would share state and the like are errors, and every
// error of every file is reported (ErrorList), each with its file and line.
// docs/decisions/0003-config-files-and-extensions.md, 0025 (what the
// reference ignores, which files are read) and 0026 (bounds) record the
// choices.
//
// # Matching
//
// Domain.Match follows the reference: at each level the exact value wins,
// then the first wildcard (in file order) whose pattern matches, then the
// key-only default; there is no backtracking; the node reached by the last
// entry is returned, so a node's rules apply only to descriptors of exactly
// its depth. Unlike the reference, keys and values are never joined with
// '_', so no two different descriptors can be confused. Match does not
// allocate.
package descriptor
