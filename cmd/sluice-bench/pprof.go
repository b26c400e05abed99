package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-rl/sluice/internal/wirefields"
)

// stageShares reads a CPU profile (pprof's profile.proto, gzipped or not)
// and returns the share of its CPU time that went to each stage (see
// stageOf), the shares summing to 1.
func stageShares(data []byte) (map[string]float64, error) {
	if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("profile: %w", err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("profile: %w", err)
		}
	}
	p, err := decodeProfile(data)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	value := len(p.sampleTypes) - 1 // the CPU time (after the sample count)
	for i, t := range p.sampleTypes {
		if t == "cpu" {
			value = i
		}
	}
	byStage := make(map[string]float64)
	total := 0.0
	for _, s := range p.samples {
		if value < 0 || value >= len(s.values) {
			return nil, errors.New("profile: a sample without the CPU value")
		}
		var stack []uint64 // function ids, leaf first
		for _, id := range s.locations {
			stack = append(stack, p.locations[id]...)
		}
		v := float64(s.values[value])
		byStage[stageOf(stack, func(id uint64) string { return p.functions[id] })] += v
		total += v
	}
	if total == 0 {
		return nil, errors.New("profile: no CPU samples")
	}
	for k := range byStage {
		byStage[k] /= total
	}
	return byStage, nil
}

// profile is the part of profile.proto the stages need.
type profile struct {
	sampleTypes []string
	samples     []profileSample
	// locations holds each location's function ids, innermost first.
	locations map[uint64][]uint64
	functions map[uint64]string
}

type profileSample struct {
	locations []uint64 // leaf first
	values    []int64
}

// decodeProfile decodes profile.proto's Profile message: sample_type (1),
// sample (2), location (4), function (5) and string_table (6).
func decodeProfile(b []byte) (*profile, error) {
	var (
		types     [][2]int64 // ValueType: type, unit (string indexes)
		samples   []profileSample
		locations = make(map[uint64][]uint64)
		funcNames = make(map[uint64]int64)
		strs      []string
	)
	err := wirefields.Each(b, func(num protowire.Number, typ protowire.Type, n uint64, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			var vt [2]int64
			err := wirefields.Each(v, func(num protowire.Number, _ protowire.Type, n uint64, _ []byte) error {
				if num == 1 || num == 2 {
					vt[num-1] = int64(n)
				}
				return nil
			})
			types = append(types, vt)
			return err
		case num == 2 && typ == protowire.BytesType:
			var s profileSample
			err := wirefields.Each(v, func(num protowire.Number, typ protowire.Type, n uint64, v []byte) error {
				switch num {
				case 1:
					return eachVarint(typ, v, n, func(x uint64) { s.locations = append(s.locations, x) })
				case 2:
					return eachVarint(typ, v, n, func(x uint64) { s.values = append(s.values, int64(x)) })
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case num == 4 && typ == protowire.BytesType:
			var id uint64
			var fns []uint64
			err := wirefields.Each(v, func(num protowire.Number, typ protowire.Type, n uint64, v []byte) error {
				switch {
				case num == 1:
					id = n
				case num == 4 && typ == protowire.BytesType: // Line
					return wirefields.Each(v, func(num protowire.Number, _ protowire.Type, n uint64, _ []byte) error {
						if num == 1 {
							fns = append(fns, n)
						}
						return nil
					})
				}
				return nil
			})
			locations[id] = fns
			return err
		case num == 5 && typ == protowire.BytesType:
			var id uint64
			var name int64
			err := wirefields.Each(v, func(num protowire.Number, _ protowire.Type, n uint64, _ []byte) error {
				switch num {
				case 1:
					id = n
				case 2:
					name = int64(n)
				}
				return nil
			})
			funcNames[id] = name
			return err
		case num == 6 && typ == protowire.BytesType:
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	p := &profile{samples: samples, locations: locations, functions: make(map[uint64]string, len(funcNames))}
	for _, t := range types {
		p.sampleTypes = append(p.sampleTypes, str(t[0]))
	}
	for id, i := range funcNames {
		p.functions[id] = str(i)
	}
	return p, nil
}

// eachVarint calls fn with a repeated integer field's values, packed (one
// length-delimited field) or not (one varint).
func eachVarint(typ protowire.Type, v []byte, n uint64, fn func(uint64)) error {
	if typ != protowire.BytesType {
		fn(n)
		return nil
	}
	for len(v) > 0 {
		x, m := protowire.ConsumeVarint(v)
		if m < 0 {
			return protowire.ParseError(m)
		}
		fn(x)
		v = v[m:]
	}
	return nil
}

// stages names the stage a third-party or sluice package belongs to, by
// import path prefix; the first match wins.
var stages = []struct{ prefix, stage string }{
	{"github.com/sluice-rl/sluice/pkg/backend/redis", "Redis client: sluice's backend (routing, coalescing)"},
	{"github.com/sluice-rl/sluice/pkg/scripts", "Redis client: sluice's backend (routing, coalescing)"},
	{"github.com/redis/go-redis", "Redis client: go-redis"},
	{"github.com/mediocregopher/radix", "Redis client: radix (the incumbent's)"},
	{"github.com/sluice-rl/sluice/internal/server", "gRPC and HTTP/2"},
	{"google.golang.org/grpc", "gRPC and HTTP/2"},
	{"golang.org/x/net", "gRPC and HTTP/2"},
	{"google.golang.org/protobuf", "protobuf"},
	{"github.com/envoyproxy/go-control-plane", "protobuf"},
	{"github.com/planetscale/vtprotobuf", "protobuf"},
	{"github.com/golang/protobuf", "protobuf"},
	{"github.com/prometheus", "metrics"},
	{"github.com/sluice-rl/sluice/internal/metrics", "metrics"},
	{"github.com/lyft/gostats", "metrics"},
	{"github.com/sirupsen/logrus", "logging"},
	{"go.opentelemetry.io", "tracing (OpenTelemetry)"},
	{"github.com/sluice-rl/sluice/", "sluice: service (validation, matching, decisions, response)"},
	{"github.com/envoyproxy/ratelimit", "the incumbent's service (matching, cache keys, response)"},
}

// stageOf attributes a sample to a stage: the stage of the innermost frame
// outside Go's runtime and standard library (so a system call or an
// allocation counts for the code that made it), or, for a stack of only
// the runtime and standard library, garbage collection or the scheduler.
func stageOf(stack []uint64, name func(uint64) string) string {
	gc := false
	for _, id := range stack {
		fn := name(id)
		pkg := funcPackage(fn)
		if first, _, _ := strings.Cut(pkg, "/"); strings.Contains(first, ".") {
			for _, s := range stages {
				if strings.HasPrefix(pkg, s.prefix) {
					return s.stage
				}
			}
			return "other: " + pkg
		}
		if strings.HasPrefix(fn, "runtime.gc") || strings.HasPrefix(fn, "runtime.bgsweep") || strings.HasPrefix(fn, "runtime.bgscavenge") {
			gc = true
		}
	}
	if gc {
		return "Go runtime: garbage collection"
	}
	return "Go runtime: scheduler, network poller, other"
}

// funcPackage is the import path of a function's package, from its
// symbol name ("example.com/a/b.(*T).M" → "example.com/a/b").
func funcPackage(fn string) string {
	fn, _, _ = strings.Cut(fn, "[") // type arguments may hold paths of their own
	slash := strings.LastIndex(fn, "/")
	if dot := strings.Index(fn[slash+1:], "."); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}
