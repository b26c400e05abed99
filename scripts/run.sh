#!/usr/bin/env bash
# The README's first command: run the service on the embedded backend
# (gRPC :8081, HTTP :8080) with the sample config. Arguments are added to
# `sluice serve`. On a fresh Debian machine with only Go it installs what
# downloading Go modules needs (as root), or says how.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/prereq.sh
prereq_go
mapfile -t base < <(prereq_base)
prereq_install "${base[@]}"
exec go run ./cmd/sluice serve --config examples/config "$@"
