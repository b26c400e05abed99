#!/usr/bin/env bash
# ab.sh measures two sluice binaries side by side: ROUNDS rounds, each
# running measure.sh once per binary (alternating which goes first), then
# merges the rounds and prints one summary table per binary. The no-op
# ceiling is measured with the first binary's rounds.
#
#   cmd/sluice-bench/ab.sh OUTDIR BIN_A BIN_B
#
# e.g. to compare main with a change:
#   git worktree add /tmp/main-wt main && (cd /tmp/main-wt && go build -o /tmp/sluice-a ./cmd/sluice)
#   go build -o /tmp/sluice-b ./cmd/sluice
#   cmd/sluice-bench/ab.sh /tmp/ab /tmp/sluice-a /tmp/sluice-b
#
# Environment: ROUNDS (3), TARGETS ("redis1 redis3"), and everything
# measure.sh reads.
set -euo pipefail
out=${1:?usage: ab.sh OUTDIR BIN_A BIN_B}
bin_a=${2:?usage: ab.sh OUTDIR BIN_A BIN_B}
bin_b=${3:?usage: ab.sh OUTDIR BIN_A BIN_B}
rounds=${ROUNDS:-3}
targets=${TARGETS:-redis1 redis3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
	order="a b"
	if [ $((r % 2)) = 0 ]; then order="b a"; fi
	for v in $order; do
		bin=$bin_a t="noop $targets"
		if [ "$v" = b ]; then bin=$bin_b t=$targets; fi
		echo "round $r, binary $v" >&2
		SLUICE_BIN="$bin" TARGETS="$t" ROUNDS=1 bash "$here/measure.sh" "$out/$v-r$r" >"$out/$v-r$r.log" 2>&1
	done
done
for v in a b; do
	echo "### $v"
	"$out/a-r1/bin/sluice-bench" summarize --only runs $(for r in $(seq 1 "$rounds"); do echo "$out/$v-r$r"; done)
done
