#!/usr/bin/env bash
# variants.sh measures the settings variants: ROUNDS rounds,
# each running measure.sh once per variant, so the variants are measured side
# by side under the same conditions; then it merges the rounds and prints one
# summary table per variant.
#
#   cmd/sluice-bench/variants.sh OUTDIR
set -euo pipefail
out=${1:?usage: variants.sh OUTDIR}
rounds=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$out"
variants=(base nocoalesce noworkers nocache)
for r in $(seq 1 "$rounds"); do
	for v in "${variants[@]}"; do
		case $v in
		base) env="" targets="noop memory redis1 redis3 redis3fw attack" ;;
		nocoalesce) env="SLUICE_REDIS_COALESCE=false" targets="redis1 redis3" ;;
		noworkers) env="SLUICE_GRPC_STREAM_WORKERS=0" targets="memory redis1" ;;
		nocache) env="SLUICE_LOCAL_CACHE=false" targets="attack" ;;
		esac
		echo "round $r, variant $v" >&2
		SLUICE_ENV="$env" TARGETS="$targets" ROUNDS=1 bash "$here/measure.sh" "$out/$v-r$r" >"$out/$v-r$r.log" 2>&1
	done
done
(cd "$root" && go build -o "$out/sluice-bench" ./cmd/sluice-bench)
for v in "${variants[@]}"; do
	echo "### $v"
	"$out/sluice-bench" summarize --only runs $(for r in $(seq 1 "$rounds"); do echo "$out/$v-r$r"; done)
done
