#!/usr/bin/env bash
# measure.sh runs the measurements of docs/benchmarks.md: alternating rounds
# of short runs against the no-op ceiling, sluice on the memory backend, and
# sluice on a standalone redis-server with one and with three rules per
# descriptor, then the attack mix. Everything listens on 127.0.0.1; every
# process is started here, bounded in time, and stopped by its PID.
#
#   cmd/sluice-bench/measure.sh OUTDIR
#
# Environment: ROUNDS (3), DURATION (10s), WARMUP (2s), C (64), KEYS (10000),
# TARGETS ("noop memory redis1 redis3 attack"; also redis3fw: three fixed
# windows, the incumbent's only algorithm, where redis3 mixes three), SLUICE_ENV (extra KEY=VALUE
# settings for every sluice run, e.g. SLUICE_LOCAL_CACHE=false), NICE (run
# redis-server, the servers and the load generator at this niceness, e.g.
# -10, to shield them from other work on a shared machine; needs root),
# SLUICE_BIN (measure this sluice binary instead of building cmd/sluice: a
# patched build), INCUMBENT_BIN (an envoyproxy/ratelimit binary, built as
# docs/benchmarks.md says: adds the targets inc1, one descriptor with one
# per-second limit, and inc3, three descriptors of one fixed window each,
# the incumbent's only way to apply three limits; redis3d runs sluice on
# that same three-descriptor config; incattack is the attack mix).
#
# Every run records, besides the load generator's report, the CPU time of
# the server, redis-server and the load generator, and Redis's own figures
# from INFO (reset with CONFIG RESETSTAT before the run): the usec every
# data command took (usec per decision = that / descriptors decided), and
# used_memory and the key count at the end of the run.
set -euo pipefail

out=${1:?usage: measure.sh OUTDIR}
rounds=${ROUNDS:-3}
duration=${DURATION:-10s}
warmup=${WARMUP:-2s}
c=${C:-64}
keys=${KEYS:-10000}
targets=${TARGETS:-noop memory redis1 redis3 attack}
if [ -n "${INCUMBENT_BIN:-}" ] && [ -z "${TARGETS:-}" ]; then
	targets="noop redis1 inc1 redis3fw redis3d inc3 attack incattack"
fi
prio=(nice -n "${NICE:-0}")
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/bin" "$out/conf1" "$out/conf3" "$out/conf3fw" "$out/conf3d" \
	"$out/inc1/ratelimit/config" "$out/inc3/ratelimit/config"

redis_port=16379 noop_port=19081 grpc_port=19181 http_port=19180 debug_port=19170
for p in $redis_port $noop_port $grpc_port $http_port $debug_port; do
	if (echo >/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
		echo "port $p is in use" >&2
		exit 1
	fi
done

(cd "$root" && go build -o "$out/bin/sluice" ./cmd/sluice && go build -o "$out/bin/sluice-bench" ./cmd/sluice-bench)
if [ -n "${SLUICE_BIN:-}" ]; then cp "$SLUICE_BIN" "$out/bin/sluice"; fi
if [ -n "${INCUMBENT_BIN:-}" ]; then cp "$INCUMBENT_BIN" "$out/bin/incumbent"; fi

cat >"$out/conf1/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 50}
EOF
cat >"$out/conf3/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: remote_address
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 50}
      - {name: per_minute, algorithm: sliding_window, unit: minute, requests_per_unit: 1000}
      - {name: per_hour, algorithm: token_bucket, unit: hour, requests_per_unit: 20000, burst: 2000}
EOF
cat >"$out/conf3fw/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: remote_address
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 50}
      - {name: per_minute, unit: minute, requests_per_unit: 1000}
      - {name: per_hour, unit: hour, requests_per_unit: 20000}
EOF
cat >"$out/conf3d/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 20000}
EOF
cp "$out/conf1/bench.yaml" "$out/inc1/ratelimit/config/"
cp "$out/conf3d/bench.yaml" "$out/inc3/ratelimit/config/"

wait_port() { # port: wait up to 10 s for it to accept connections
	for _ in $(seq 100); do
		(echo >/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0
		sleep 0.1
	done
	echo "nothing listens on $1" >&2
	return 1
}

stop() { # pid
	kill "$1" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	kill -9 "$1" 2>/dev/null || true
}

pids=()
cleanup() { # stop everything started here, and wait until it has exited
	for pid in "${pids[@]}"; do stop "$pid"; done
}
trap cleanup EXIT

cpu_ticks() { # pid: user+system clock ticks so far
	awk '{print $14 + $15}' "/proc/$1/stat"
}

num() { # expression: evaluated by bc, printed as a JSON number
	printf '%.3f' "$(echo "$1" | bc -l)"
}

redis_calls() { # script calls Redis has run so far (EVALSHA and EVAL)
	redis-cli -p $redis_port info commandstats |
		awk -F'[=,:]' '/^cmdstat_eval(sha)?:/{n += $3} END{print n + 0}'
}

redis_usec() { # usec and calls of the commands clients sent, since CONFIG RESETSTAT
	# A script's usec includes the commands it ran, which commandstats also
	# lists on their own: when scripts ran (sluice), count only them.
	redis-cli -p $redis_port info commandstats |
		awk -F'[=,:]' '/^cmdstat_/ && !/^cmdstat_(config|info|flushall|dbsize|ping|hello|client|script)[:|]/ {
			u += $5; n += $3
			if ($1 ~ /^cmdstat_eval(sha)?$/) { su += $5; sn += $3 }
		} END { if (sn > 0) print su, sn; else print u + 0, n + 0 }'
}

busy_ticks() { # all CPUs' non-idle clock ticks so far
	awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat
}

"${prio[@]}" timeout 7200 redis-server --bind 127.0.0.1 --port $redis_port --save '' --appendonly no \
	--logfile "$out/redis.log" &
redis_pid=$!
pids+=("$redis_pid")
wait_port $redis_port
redis=$(pgrep -P "$redis_pid" | head -1)
redis-server --version >"$out/redis.version"

# run NAME ROUND SERVER-KIND CONF [bench flags...]
run() {
	local name=$1 round=$2 kind=$3 conf=$4
	shift 4
	local pid port
	case $kind in
	noop)
		"${prio[@]}" timeout 300 "$out/bin/sluice-bench" noop --addr 127.0.0.1:$noop_port --for 120s 2>"$out/$name.$round.server.log" &
		pid=$! port=$noop_port
		;;
	memory | redis)
		if [ "$kind" = redis ]; then redis-cli -p $redis_port flushall >/dev/null; fi
		"${prio[@]}" env GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc_port HOST=127.0.0.1 PORT=$http_port LOG_LEVEL=warn \
			BACKEND_TYPE=$kind REDIS_URL=127.0.0.1:$redis_port REDIS_SOCKET_TYPE=tcp ${SLUICE_ENV:-} \
			timeout 300 "$out/bin/sluice" serve --config "$out/$conf" >"$out/$name.$round.server.log" 2>&1 &
		pid=$! port=$grpc_port
		;;
	incumbent)
		redis-cli -p $redis_port flushall >/dev/null
		# Loopback only; no statsd; the config read once from $out/$conf.
		"${prio[@]}" env HOST=127.0.0.1 PORT=$http_port GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc_port \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT=$debug_port LOG_LEVEL=warn USE_STATSD=false \
			RUNTIME_ROOT="$out/$conf" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:$redis_port \
			timeout 300 "$out/bin/incumbent" >"$out/$name.$round.server.log" 2>&1 &
		pid=$! port=$grpc_port
		;;
	esac
	pids+=("$pid")
	wait_port $port
	local server before after rbefore rafter bbefore bafter t0 t1 load
	server=$(pgrep -P "$pid" | head -1) # the server under timeout(1): its CPU time is the one to read
	before=$(cpu_ticks "$server") rbefore=$(cpu_ticks "$redis") bbefore=$(busy_ticks) t0=$(date +%s.%N)
	local cbefore cafter
	redis-cli -p $redis_port config resetstat >/dev/null
	cbefore=$(redis_calls)
	load=$(cut -d' ' -f1 /proc/loadavg)
	"${prio[@]}" timeout 120 "$out/bin/sluice-bench" --addr 127.0.0.1:$port --duration "$duration" --warmup "$warmup" \
		-c "$c" --keys "$keys" --quiet "$@" >"$out/$name.$round.json"
	after=$(cpu_ticks "$server") rafter=$(cpu_ticks "$redis") bafter=$(busy_ticks) t1=$(date +%s.%N)
	cafter=$(redis_calls)
	local rusec rcmds rmem rkeys
	read -r rusec rcmds < <(redis_usec)
	rmem=$(redis-cli -p $redis_port info memory | awk -F: '/^used_memory:/{print $2+0}')
	rkeys=$(redis-cli -p $redis_port dbsize)
	# CPU seconds over the bench process's lifetime (warm-up included): the
	# server, redis-server, the load generator, and every other process on
	# the machine (other work competing for the same cores).
	local hz client
	hz=$(getconf CLK_TCK)
	client=$(grep -o '"client_cpu_s":[0-9.e-]*' "$out/$name.$round.json" | cut -d: -f2)
	cat >"$out/$name.$round.cpu.json" <<JSON
{"wall_s": $(num "$t1 - $t0"), "server_cpu_s": $(num "($after - $before) / $hz"), "redis_cpu_s": $(num "($rafter - $rbefore) / $hz"), "client_cpu_s": $(num "$client"), "others_cpu_s": $(num "($bafter - $bbefore - ($after - $before) - ($rafter - $rbefore)) / $hz - $client"), "redis_script_calls": $((cafter - cbefore)), "redis_usec": $rusec, "redis_commands": $rcmds, "redis_used_memory": $rmem, "redis_keys": $rkeys, "loadavg_before": $load}
JSON
	stop "$pid"
	echo "$name round $round: $(grep -o '"throughput_rps":[0-9.]*' "$out/$name.$round.json")" >&2
}

for round in $(seq "$rounds"); do
	for t in $targets; do
		case $t in
		noop) run noop "$round" noop conf1 --descriptor 'remote_address={ip}' ;;
		memory) run memory "$round" memory conf1 --descriptor 'remote_address={ip}' ;;
		redis1) run redis1 "$round" redis conf1 --descriptor 'remote_address={ip}' ;;
		redis3) run redis3 "$round" redis conf3 --descriptor 'remote_address={ip}' ;;
		redis3fw) run redis3fw "$round" redis conf3fw --descriptor 'remote_address={ip}' ;;
		attack) run attack "$round" redis conf1 --descriptor 'remote_address={ip}' --attack-keys 4 --attack-share 0.3 ;;
		redis3d) run redis3d "$round" redis conf3d --descriptor 'a={ip}' --descriptor 'b={ip}' --descriptor 'c={ip}' ;;
		inc1) run inc1 "$round" incumbent inc1 --descriptor 'remote_address={ip}' ;;
		inc3) run inc3 "$round" incumbent inc3 --descriptor 'a={ip}' --descriptor 'b={ip}' --descriptor 'c={ip}' ;;
		incattack) run incattack "$round" incumbent inc1 --descriptor 'remote_address={ip}' --attack-keys 4 --attack-share 0.3 ;;
		esac
	done
done
