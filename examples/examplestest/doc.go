// Package examplestest checks the deployment examples shipped with sluice:
// examples/envoy (an Envoy bootstrap and the sluice config it talks to),
// examples/istio (EnvoyFilter patches and their sluice ConfigMap),
// examples/kubernetes (Deployment, Service, ConfigMap, PodDisruptionBudget),
// the root Dockerfile and docker-compose.yml, and deploy/.
//
// No Envoy binary and no Docker engine run where these tests run. Envoy
// configuration is checked against Envoy's own protos from go-control-plane:
// strict protojson parsing (unknown fields and unknown Any types fail), the
// generated ValidateAll on every message including each unpacked
// typed_config, and the cross-references Envoy checks at load (clusters that
// routes name, filter order). The rate-limit descriptors the routes can
// produce are enumerated and matched with pkg/descriptor against the example
// sluice configs. Kubernetes manifests are decoded strictly into small local
// structs; docker-compose.yml is checked with `docker-compose config -q` when
// that tool is installed.
//
// The package holds only tests; it exports nothing.
package examplestest
