#!/usr/bin/env bash
# Runs the sluice command from this checkout (go run ./cmd/sluice) with the
# arguments given, finding Go as scripts/run.sh does (a tarball in
# /usr/local/go is found even when it is not on PATH):
#   ./scripts/sluice.sh check --addr 127.0.0.1:8081 --domain api --descriptor user=alice
#   ./scripts/sluice.sh validate examples/config
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/prereq.sh
prereq_go
exec go run ./cmd/sluice "$@"
