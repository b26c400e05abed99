#!/usr/bin/env bash
# The project's test command (README "Run the tests"): installs what the
# tests need when it is missing, then formatting, vet, the whole suite under
# the race detector, the release build's tags, and a short run of every fuzz
# target. Every step runs even when one before it failed; the failed steps
# are listed at the end and the command then exits 1.
#
# Needs: Go; gcc and libc6-dev (the race detector needs cgo); redis-server
# and redis-cli, valkey-server and valkey-cli (tests start their own servers
# on free loopback ports; the Redis suites run on each);
# docker-compose (validates docker-compose.yml, no engine needed); chromium
# (the live page's headless test). As root, missing Debian packages are
# installed with apt-get; as another user the exact command is printed and
# nothing runs.
#
# SLUICE_TEST_REDIS=off runs without Redis: redis-server is not installed
# and the tests that need it are skipped. Without it, a missing redis-server
# fails those tests (decision 0045). FUZZTIME (default 50000x: that many
# inputs) is each fuzz target's budget.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

. scripts/prereq.sh
prereq_go
mapfile -t need < <(prereq_base)
need+=(gcc:gcc libc6-dev:/usr/include/stdlib.h docker-compose:docker-compose chromium:chromium)
if [ "${SLUICE_TEST_REDIS:-}" != off ]; then
  need+=(redis-server:redis-server redis-tools:redis-cli)
fi
prereq_install "${need[@]}"
# Valkey, for the Redis suites' second run (step "go test -race, Valkey").
# Debian bookworm has it in bookworm-backports only: that source is added
# when no other offers valkey-server.
if [ "${SLUICE_TEST_REDIS:-}" != off ] && ! { command -v valkey-server && command -v valkey-cli; } >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing: valkey-server valkey-tools; install them (Debian bookworm: from bookworm-backports), then run this again" >&2
    exit 1
  fi
  echo "installing: valkey-server valkey-tools"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  if ! apt-cache policy valkey-server | grep -q 'Candidate: [0-9]'; then
    codename=$(. /etc/os-release && [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}" || true)
    if [ -z "$codename" ]; then
      echo "no apt source offers valkey-server here: install valkey-server and valkey-tools, then run this again" >&2
      exit 1
    fi
    echo "deb http://deb.debian.org/debian ${codename}-backports main" >"/etc/apt/sources.list.d/${codename}-backports.list"
    apt-get update -qq
  fi
  apt-get install -y -qq --no-install-recommends valkey-server valkey-tools >/dev/null
fi
export CGO_ENABLED=1 # the race detector needs cgo
go version

failed=()
# step NAME CMD...: runs CMD, and records NAME as failed when it fails
# instead of stopping, so that one run reports every failure.
step() {
  local name=$1
  shift
  echo "== $name"
  if ! "$@"; then
    echo "FAILED: $name"
    failed+=("$name")
  fi
}

gofmt_clean() {
  local unformatted
  unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
  if [ -n "$unformatted" ]; then
    echo "gofmt would change:"; echo "$unformatted"; return 1
  fi
}
step gofmt gofmt_clean
step "go vet" go vet ./...
step "go test -race" go test -race -count=1 -timeout 30m ./...
# The Redis suites once more on Valkey (docs/operations.md, "Tested Redis
# and Valkey versions"): the backend's contract and cluster tests, the
# denial cache's, the harness's own and the black-box integration tests,
# with valkey-server and valkey-cli in place of redis-server and redis-cli
# (SLUICE_TEST_REDIS_SERVER, internal/testkit/redistest).
if [ "${SLUICE_TEST_REDIS:-}" != off ]; then
  step "go test -race, Valkey" env SLUICE_TEST_REDIS_SERVER=valkey-server go test -race -count=1 -timeout 30m \
    ./internal/testkit/redistest/ ./pkg/backend/redis/ ./internal/denycache/ ./test/integration/
fi
# The Envoy Gateway examples, against Envoy Gateway's API types: a module of
# its own, so its dependencies stay out of sluice's.
step "examples/envoy-gateway/validate" sh -c 'cd examples/envoy-gateway/validate && go vet ./... && go test -count=1 ./...'
# The Envoy AI Gateway example, against AI Gateway's QuotaPolicy type and
# the Kubernetes API types: a module of its own too.
step "examples/envoy-ai-gateway/validate" sh -c 'cd examples/envoy-ai-gateway/validate && go vet ./... && go test -count=1 ./...'
# The Prometheus rules and the Grafana dashboard's queries, against
# Prometheus's own parser and engine: a module of its own as well.
step "examples/prometheus/validate" sh -c 'cd examples/prometheus/validate && go vet ./... && go test -count=1 ./...'
# The release build's tags (Dockerfile): the codec's vtproto marshaler.
step "go vet, release tags" go vet -tags timetzdata,vtprotobuf ./...
step "go test, release tags" go test -race -count=1 -tags timetzdata,vtprotobuf ./internal/server/ ./cmd/sluice/
# The release workflow's build (.github/workflows/release.yml builds the
# Dockerfile): the Dockerfile's go build line, for every platform the
# workflow publishes, stamped with a tag; the binary of this machine's
# platform must report it.
step "release build" ./scripts/release-build.sh

# The Helm chart (charts/sluice), rendered with helm for every values file
# and decoded strictly into the Kubernetes API types. Its test is a module of
# its own (charts/test), so those types stay out of sluice's dependencies.
# helm is built with go install when missing (decision 0042).
helm_chart() {
  if ! command -v helm >/dev/null && [ ! -x "$(go env GOPATH)/bin/helm" ]; then
    echo "installing helm (go install helm.sh/helm/v3/cmd/helm@v3.22.0)"
    go install helm.sh/helm/v3/cmd/helm@v3.22.0 || return 1
  fi
  (cd charts/test && go vet ./... && go test -count=1 ./...)
}
step "helm chart" helm_chart

# The release workflow (.github/workflows/release.yml), checked by actionlint
# built from its Go module at a fixed version (decision 0090).
step "actionlint" go run github.com/rhysd/actionlint/cmd/actionlint@v1.7.12 .github/workflows/release.yml

# Fuzz targets, briefly each (seed corpora run in the normal tests above).
# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can
# report "context deadline exceeded" as a failure when the time runs out
# while a worker is busy (golang/go#75804, fixed in Go 1.27), with no
# failing input; a count has no deadline to race. A duration (FUZZTIME=3m)
# still works for longer runs by hand.
fuzztime=${FUZZTIME:-50000x}
mapfile -t pkgs < <(go list -f '{{.ImportPath}} {{.Dir}}' ./...)
for line in "${pkgs[@]}"; do
  read -r pkg dir <<<"$line"
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    step "fuzz $pkg $f ($fuzztime)" go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" "$pkg"
  done
done

took="$(( (SECONDS - start) / 60 ))m$(( (SECONDS - start) % 60 ))s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "${#failed[@]} step(s) FAILED in $took:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "all tests passed in $took"
