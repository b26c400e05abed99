package examplestest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"gopkg.in/yaml.v3"
)

// The Kubernetes objects the examples hold, with only the fields the
// examples use. They are decoded strictly: a field not declared here (a
// typo such as readinesProbe, or a field in the wrong place) fails the
// test, so these structs double as the list of what the manifests may say.
// No Kubernetes client library is involved.

type objectMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type typeMeta struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
}

// meta returns the type metadata; every kind that embeds typeMeta has it.
func (tm typeMeta) meta() typeMeta { return tm }

type namespace struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta `yaml:"metadata"`
}

type configMap struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta        `yaml:"metadata"`
	Data     map[string]string `yaml:"data"`
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type deployment struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		Replicas             int           `yaml:"replicas"`
		RevisionHistoryLimit int           `yaml:"revisionHistoryLimit"`
		Selector             labelSelector `yaml:"selector"`
		Strategy             struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxUnavailable intOrString `yaml:"maxUnavailable"`
				MaxSurge       intOrString `yaml:"maxSurge"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template struct {
			Metadata objectMeta `yaml:"metadata"`
			Spec     podSpec    `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	AutomountServiceAccountToken  *bool `yaml:"automountServiceAccountToken"`
	EnableServiceLinks            *bool `yaml:"enableServiceLinks"`
	TerminationGracePeriodSeconds int   `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot   *bool  `yaml:"runAsNonRoot"`
		RunAsUser      *int64 `yaml:"runAsUser"`
		RunAsGroup     *int64 `yaml:"runAsGroup"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	TopologySpreadConstraints []struct {
		MaxSkew           int           `yaml:"maxSkew"`
		TopologyKey       string        `yaml:"topologyKey"`
		WhenUnsatisfiable string        `yaml:"whenUnsatisfiable"`
		LabelSelector     labelSelector `yaml:"labelSelector"`
	} `yaml:"topologySpreadConstraints"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name            string `yaml:"name"`
	Image           string `yaml:"image"`
	ImagePullPolicy string `yaml:"imagePullPolicy"`
	Ports           []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	} `yaml:"ports"`
	Env []struct {
		Name      string  `yaml:"name"`
		Value     *string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Key      string `yaml:"key"`
				Optional bool   `yaml:"optional"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	ReadinessProbe  *probe `yaml:"readinessProbe"`
	LivenessProbe   *probe `yaml:"livenessProbe"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Privileged               *bool `yaml:"privileged"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
}

type probe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
	GRPC *struct {
		Port    int     `yaml:"port"`
		Service *string `yaml:"service"`
	} `yaml:"grpc"`
	TCPSocket *struct {
		Port intOrString `yaml:"port"`
	} `yaml:"tcpSocket"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	TimeoutSeconds   int `yaml:"timeoutSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type service struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		Type      string            `yaml:"type"`
		ClusterIP string            `yaml:"clusterIP"`
		Selector  map[string]string `yaml:"selector"`
		Ports     []struct {
			Name        string      `yaml:"name"`
			Port        int         `yaml:"port"`
			TargetPort  intOrString `yaml:"targetPort"`
			AppProtocol string      `yaml:"appProtocol"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type podDisruptionBudget struct {
	typeMeta `yaml:",inline"`
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		MinAvailable intOrString   `yaml:"minAvailable"`
		Selector     labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

// intOrString is Kubernetes' IntOrString: a port number or a port name.
type intOrString struct {
	Int    int
	String string
}

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or a name", n.Line)
	}
	if n.Tag == "!!int" {
		i, err := strconv.Atoi(n.Value)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		v.Int = i
		return nil
	}
	v.String = n.Value
	return nil
}

// manifest is one YAML document of a manifest file.
type manifest struct {
	file  string
	index int
	kind  string
	name  string
	raw   []byte // the document alone, re-encoded
}

func (m manifest) String() string { return fmt.Sprintf("%s#%d %s/%s", m.file, m.index, m.kind, m.name) }

// decode decodes m strictly into v: unknown fields are errors.
func (m manifest) decode(v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(m.raw))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", m, err)
	}
	return nil
}

// readManifests splits every YAML file of a folder (relative to the module
// root) into documents, in file order.
func readManifests(t *testing.T, dir string) []manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoPath(t, dir), "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	sort.Strings(files)
	var out []manifest
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := splitDocuments(filepath.Base(f), data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, docs...)
	}
	return out
}

// splitDocuments splits a multi-document YAML file, reading each
// document's kind and name.
func splitDocuments(file string, data []byte) ([]manifest, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []manifest
	for i := 0; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		var head struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		}
		if err := n.Decode(&head); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		raw, err := yaml.Marshal(&n)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		out = append(out, manifest{file: file, index: i, kind: head.Kind, name: head.Metadata.Name, raw: raw})
	}
}

// subset reports whether every label of sel is in labels with the same
// value (how a selector picks pods). An empty selector selects nothing here.
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
