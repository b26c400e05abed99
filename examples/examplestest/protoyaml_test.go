package examplestest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// repoFile reads a file given relative to the module root.
func repoFile(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, rel))
	if err != nil {
		t.Fatalf("read example: %v", err)
	}
	return b
}

// repoPath turns a path relative to the module root into one usable from
// this package's directory (where go test runs).
func repoPath(t testing.TB, rel string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s has no go.mod: %v", root, err)
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

// yamlToJSON converts one YAML document to JSON, the form protojson reads.
// Mapping keys must be strings, as they are in every Envoy config.
func yamlToJSON(doc []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	return valueToJSON(v)
}

// valueToJSON marshals a value decoded from YAML to JSON.
func valueToJSON(v any) ([]byte, error) {
	j, err := jsonable(v)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("yaml to json: %w", err)
	}
	return out, nil
}

// jsonable rewrites what yaml.v3 decodes into something encoding/json can
// marshal, failing on non-string mapping keys.
func jsonable(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			j, err := jsonable(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = j
		}
		return out, nil
	case map[any]any:
		for k := range x {
			return nil, fmt.Errorf("mapping key %v (%T) is not a string", k, k)
		}
		return map[string]any{}, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			j, err := jsonable(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = j
		}
		return out, nil
	default:
		return v, nil
	}
}

// typeRecorder resolves Any type URLs through the global registry (filled
// by the blank imports of the extension packages) and records every type it
// resolved. An unregistered type is an error, as with the registry itself:
// a typed_config nobody imported fails the test instead of passing
// unchecked.
type typeRecorder struct {
	seen map[string]bool
}

func newTypeRecorder() *typeRecorder { return &typeRecorder{seen: map[string]bool{}} }

func (r *typeRecorder) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	r.seen[string(name)] = true
	return mt, nil
}

func (r *typeRecorder) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", url, err)
	}
	r.seen[string(mt.Descriptor().FullName())] = true
	return mt, nil
}

func (r *typeRecorder) FindExtensionByName(name protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByName(name)
}

func (r *typeRecorder) FindExtensionByNumber(message protoreflect.FullName, field protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByNumber(message, field)
}

// unmarshalStrict reads JSON into m: unknown fields, bad enum names and
// unresolvable Any types are errors.
func unmarshalStrict(js []byte, m proto.Message, r *typeRecorder) error {
	if err := (protojson.UnmarshalOptions{Resolver: r}).Unmarshal(js, m); err != nil {
		return fmt.Errorf("protojson %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// yamlToProto is yamlToJSON then unmarshalStrict.
func yamlToProto(doc []byte, m proto.Message, r *typeRecorder) error {
	js, err := yamlToJSON(doc)
	if err != nil {
		return err
	}
	return unmarshalStrict(js, m, r)
}

// validator is what protoc-gen-validate generates on every Envoy message.
type validator interface{ ValidateAll() error }

// validateDeep runs the generated ValidateAll on m and on the content of
// every Any found anywhere inside it, at any depth (ValidateAll itself stops
// at an Any: it checks the type URL, not what is packed in it). It returns
// the full names of the unpacked types, sorted, and every error found.
func validateDeep(m proto.Message, r *typeRecorder) ([]string, error) {
	var errs []error
	var unpacked []string
	var visit func(proto.Message, string)
	visit = func(m proto.Message, where string) {
		v, ok := m.(validator)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s has no ValidateAll", where, m.ProtoReflect().Descriptor().FullName()))
			return
		}
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
		for _, a := range anysIn(m.ProtoReflect()) {
			mt, err := r.FindMessageByURL(a.GetTypeUrl())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			inner := mt.New().Interface()
			if err := proto.Unmarshal(a.GetValue(), inner); err != nil {
				errs = append(errs, fmt.Errorf("%s: unpack %s: %w", where, a.GetTypeUrl(), err))
				continue
			}
			name := string(mt.Descriptor().FullName())
			unpacked = append(unpacked, name)
			visit(inner, where+" > "+name)
		}
	}
	visit(m, string(m.ProtoReflect().Descriptor().FullName()))
	sort.Strings(unpacked)
	return unpacked, errors.Join(errs...)
}

// anysIn returns every Any set anywhere inside m, not descending into the
// Anys themselves.
func anysIn(m protoreflect.Message) []*anypb.Any {
	var out []*anypb.Any
	var walk func(protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if a, ok := m.Interface().(*anypb.Any); ok {
			out = append(out, a)
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsMap():
				if fd.MapValue().Message() != nil {
					v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
						walk(mv.Message())
						return true
					})
				}
			case fd.IsList():
				if fd.Message() != nil {
					for i := 0; i < v.List().Len(); i++ {
						walk(v.List().Get(i).Message())
					}
				}
			case fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m)
	return out
}
