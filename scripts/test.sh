#!/usr/bin/env bash
# The project's test command (README "Run the tests"): formatting, vet, the
# whole suite under the race detector (Redis tests start their own
# redis-server processes), then a short run of every fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
go test -race -count=1 -timeout 30m ./...
# The release build's tags (Dockerfile): the codec's vtproto marshaler.
go vet -tags timetzdata,vtprotobuf ./...
go test -race -count=1 -tags timetzdata,vtprotobuf ./internal/server/ ./cmd/sluice/

# Fuzz targets, briefly each (seed corpora run in the normal tests above).
fuzztime=${FUZZTIME:-15s}
go list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "fuzz $pkg $f ($fuzztime)"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" "$pkg"
  done
done
