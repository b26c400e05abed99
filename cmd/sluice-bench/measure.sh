#!/usr/bin/env bash
# measure.sh runs the load measurements of docs/benchmarks.md: alternating
# rounds of short runs of every target in turn, each against a fresh server
# process, with the no-op ceiling, sluice, and (given INCUMBENT_BIN)
# envoyproxy/ratelimit on the same Redis and the same load. Everything
# listens on 127.0.0.1; every process is started here, bounded in time
# (timeout), and stopped by its PID.
#
#   cmd/sluice-bench/measure.sh OUTDIR
#   sluice-bench summarize OUTDIR        # the tables of docs/benchmarks.md
#
# TARGETS names targets and scenario groups (default: all):
#   main         noop noopredis memory redis1 inc1 redis3 redis3fw redis3d inc3 attack incattack
#   concurrency  noop, noopredis, redis1 and inc1 at c = 1, 16, 256 (NAME-cN), and at C
#   cluster      redis1 inc1 and redis3d inc3 on one Redis and on a 3-master Redis
#                Cluster (NAMEcl)
#   rules        redis1, redis3fw, redis6fw: 1, 3, 6 fixed-window rules on one descriptor
#   descriptors  redis1 inc1, redis3d inc3, redis5d inc5, redis10d inc10: 1, 3, 5, 10
#                descriptors per request
#   rediscpu     each Redis load beside the incumbent's: redis1 inc1, redis3 and
#                redis3fw (3 rules on one descriptor) against inc3, redis5d inc5,
#                redis10d inc10, attack incattack, redis1cl inc1cl, redis3dcl inc3cl
#   defaults     redis1 memory attack, and each with one speed default off: redis1nc
#                (SLUICE_REDIS_COALESCE=false), redis1nm (SLUICE_REDIS_MERGE=false),
#                redis1ev (SLUICE_REDIS_FUNCTIONS=false: EVALSHA), memorynw
#                (SLUICE_GRPC_STREAM_WORKERS=0), attacknc (SLUICE_LOCAL_CACHE=false),
#                redis1dw (SLUICE_GRPC_STATIC_WINDOWS=false), redis1gf
#                (SLUICE_GC_HEAP_FLOOR_BYTES=0), and redis1 and redis1dw at one
#                caller (-c1)
#   all          every group above
# The targets: noop (answers OK, does nothing: the ceiling); noopredis (the
# no-op, each call answered only after a Redis round trip, an ECHO shared
# by the calls waiting together: what a round trip alone costs); memory (sluice,
# embedded backend); redis1 (sluice on Redis, one descriptor, one per-second
# limit); redis3 (three rules of three algorithms on one descriptor);
# redis3fw (three fixed windows on one descriptor); redis6fw (six);
# redis3d/redis5d/redis10d (3/5/10 descriptors of one fixed window each);
# attack (redis1 with 30% of requests on 4 hot keys); redis1cl and redis3dcl
# (redis1 and redis3d on the cluster); inc1, inc3, inc5, inc10, incattack,
# inc1cl, inc3cl (the incumbent on the same configs and load). Any target takes -cN for
# concurrency N. Targets of the incumbent are skipped without INCUMBENT_BIN.
#
# Environment: ROUNDS (3), DURATION (10s), WARMUP (2s), C (64), KEYS
# (10000), TARGETS (all), SLUICE_ENV (extra KEY=VALUE settings for every
# sluice run, e.g. SLUICE_LOCAL_CACHE=false), NICE (run redis-server, the
# servers and the load generator at this niceness, e.g. -10; needs root),
# SLUICE_BIN (measure this sluice binary instead of building cmd/sluice),
# INCUMBENT_BIN (an envoyproxy/ratelimit binary, built as
# docs/benchmarks.md says), PORT_OFFSET (0; added to every port: Redis
# 16379, cluster 16380-16382 and their bus ports +10000, no-op 19081, the
# service 19180/19181, sluice's admin listener 19172, the incumbent's debug
# port 19170), LIST (print the
# targets in order and stop: nothing is built or started), PROFILE (seconds:
# save a CPU profile of the service, sluice or the incumbent, taken after
# the warm-up, as NAME.ROUND.pprof; read it with go tool pprof -top).
#
# Each run takes DURATION + WARMUP + about 1.5 s (server start and stop),
# and is bounded: the load generator by DURATION + WARMUP + 60 s, the
# servers by 3 minutes more (DURATION and WARMUP: a whole number and ms, s
# or m);
# the cluster takes about 3 s to form, once. `all` is 40 runs a round with
# the incumbent (30 without): about 8.3 minutes a round at the defaults.
#
# Every run records, besides the load generator's report (NAME.ROUND.json),
# NAME.ROUND.cpu.json (the CPU time of the server, redis-server (every node),
# the load generator and the machine's other processes, and the read and
# write system calls of the server and of redis-server: syscr + syscw of
# /proc/PID/io; the load generator reports its own; the server's peak
# resident memory, VmHWM of /proc/PID/status) and every Redis
# node's INFO commandstats, memory and keyspace at the start of the run
# (after FLUSHALL and CONFIG RESETSTAT: NAME.ROUND.redis-start.txt) and at
# its end (NAME.ROUND.redis.txt). OUTDIR/machine.json describes the machine
# and the settings.
set -euo pipefail

out=${1:?usage: measure.sh OUTDIR}
rounds=${ROUNDS:-3}
duration=${DURATION:-10s}
warmup=${WARMUP:-2s}

seconds() { # a duration as measure.sh takes it (500ms, 10s, 5m): whole seconds, rounded up
	if [[ $1 =~ ^([0-9]+)(ms|s|m)$ ]]; then
		case ${BASH_REMATCH[2]} in
		ms) echo $(((BASH_REMATCH[1] + 999) / 1000)) ;;
		s) echo $((BASH_REMATCH[1])) ;;
		m) echo $((BASH_REMATCH[1] * 60)) ;;
		esac
	else
		echo "measure.sh: a duration is a whole number followed by ms, s or m (DURATION, WARMUP), got '$1'" >&2
		return 2
	fi
}
# Every process of a run is bounded in time: the load generator by its
# run plus a minute, the servers by that plus three more minutes.
d_s=$(seconds "$duration") && w_s=$(seconds "$warmup") || exit 2
load_limit=$((d_s + w_s + 60))
server_limit=$((load_limit + 180))
c=${C:-64}
keys=${KEYS:-10000}

group() { # name: the targets of a scenario group, or the name itself
	case $1 in
	main) echo noop noopredis memory redis1 inc1 redis3 redis3fw redis3d inc3 attack incattack ;;
	concurrency) echo noop-c1 noopredis-c1 redis1-c1 inc1-c1 noop-c16 noopredis-c16 redis1-c16 inc1-c16 noop noopredis redis1 inc1 noop-c256 noopredis-c256 redis1-c256 inc1-c256 ;;
	cluster) echo redis1 inc1 redis1cl inc1cl redis3d inc3 redis3dcl inc3cl ;;
	rules) echo redis1 redis3fw redis6fw ;;
	descriptors) echo redis1 inc1 redis3d inc3 redis5d inc5 redis10d inc10 ;;
	rediscpu) echo redis1 inc1 redis3 redis3fw inc3 redis5d inc5 redis10d inc10 attack incattack redis1cl inc1cl redis3dcl inc3cl ;;
	defaults) echo redis1 redis1nc redis1nm redis1ev memory memorynw attack attacknc redis1dw redis1gf redis1-c1 redis1dw-c1 ;;
	all) echo main concurrency cluster rules descriptors rediscpu defaults ;;
	*) echo "$1" ;;
	esac
}
expand() { # words: targets, groups expanded, first occurrence kept
	local w t
	for w in "$@"; do
		if [ "$(group "$w")" != "$w" ]; then
			# shellcheck disable=SC2046
			expand $(group "$w")
		else
			echo "$w"
		fi
	done
}
known=" noop noopredis memory memorynw redis1 redis1nc redis1nm redis1ev redis1dw redis1gf redis1cl redis3 redis3fw redis6fw redis3d redis3dcl redis5d redis10d attack attacknc inc1 inc1cl inc3 inc3cl inc5 inc10 incattack "
targets=()
for t in $(expand ${TARGETS:-all}); do
	case " ${targets[*]} " in *" $t "*) continue ;; esac
	case $known in *" ${t%-c[0-9]*} "*) ;; *)
		echo "unknown target $t (known: $known; groups: main concurrency cluster rules descriptors rediscpu defaults all)" >&2
		exit 2
		;;
	esac
	case $t in inc*)
		if [ -z "${INCUMBENT_BIN:-}" ]; then
			echo "skipping $t: no INCUMBENT_BIN" >&2
			continue
		fi
		;;
	esac
	targets+=("$t")
done
if [ -n "${LIST:-}" ]; then # print the targets a run would measure, and stop
	printf '%s\n' "${targets[@]}"
	exit 0
fi
cluster=false
case " ${targets[*]} " in *cl" "* | *cl-c*) cluster=true ;; esac

prio=(nice -n "${NICE:-0}")
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/bin"

o=${PORT_OFFSET:-0}
redis_port=$((16379 + o)) noop_port=$((19081 + o)) grpc_port=$((19181 + o)) http_port=$((19180 + o)) debug_port=$((19170 + o))
admin_port=$((19172 + o))
cluster_ports=($((16380 + o)) $((16381 + o)) $((16382 + o)))
busy=($redis_port $noop_port $grpc_port $http_port $debug_port $admin_port)
if $cluster; then
	for p in "${cluster_ports[@]}"; do busy+=("$p" $((p + 10000))); done
fi
for p in "${busy[@]}"; do
	if (echo >/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
		echo "port $p is in use" >&2
		exit 1
	fi
done

(cd "$root" && go build -o "$out/bin/sluice" ./cmd/sluice && go build -o "$out/bin/sluice-bench" ./cmd/sluice-bench)
if [ -n "${SLUICE_BIN:-}" ]; then cp "$SLUICE_BIN" "$out/bin/sluice"; fi
if [ -n "${INCUMBENT_BIN:-}" ]; then cp "$INCUMBENT_BIN" "$out/bin/incumbent"; fi

# conf NAME: write the bench config NAME (stdin) for sluice (OUTDIR/NAME,
# read whole), and for the incumbent (OUTDIR/inc-NAME/ratelimit/config).
conf() {
	mkdir -p "$out/$1" "$out/inc-$1/ratelimit/config"
	cat >"$out/$1/bench.yaml"
	cp "$out/$1/bench.yaml" "$out/inc-$1/ratelimit/config/"
}
conf conf1 <<'EOF'
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 50}
EOF
conf conf3 <<'EOF'
domain: bench
descriptors:
  - key: remote_address
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 50}
      - {name: per_minute, algorithm: sliding_window, unit: minute, requests_per_unit: 1000}
      - {name: per_hour, algorithm: token_bucket, unit: hour, requests_per_unit: 20000, burst: 2000}
EOF
conf conf3fw <<'EOF'
domain: bench
descriptors:
  - key: remote_address
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 50}
      - {name: per_minute, unit: minute, requests_per_unit: 1000}
      - {name: per_hour, unit: hour, requests_per_unit: 20000}
EOF
{ # conf3fw's three rules and three more
	cat "$out/conf3fw/bench.yaml"
	echo "      - {name: per_day, unit: day, requests_per_unit: 100000}"
	echo "      - {name: per_week, unit: week, requests_per_unit: 500000}"
	echo "      - {name: per_month, unit: month, requests_per_unit: 1000000}"
} | conf conf6fw
conf conf3d <<'EOF'
domain: bench
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 20000}
EOF
units=(second minute hour) limits=(50 1000 20000) d5=() d10=()
for i in $(seq 0 4); do d5+=(--descriptor "d$i={ip}"); done
for i in $(seq 0 9); do d10+=(--descriptor "d$i={ip}"); done
for n in 5 10; do # N descriptors d0 ... d(N-1), one fixed window each: second, minute, hour in turn
	{
		echo "domain: bench"
		echo "descriptors:"
		for i in $(seq 0 $((n - 1))); do
			echo "  - key: d$i"
			echo "    rate_limit: {unit: ${units[i % 3]}, requests_per_unit: ${limits[i % 3]}}"
		done
	} | conf conf${n}d
done

wait_port() { # port: wait up to 10 s for it to accept connections
	for _ in $(seq 100); do
		(echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
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

cpu_ticks() { # pid...: user+system clock ticks so far, summed
	local p
	for p in "$@"; do cat "/proc/$p/stat"; done | awk '{n += $14 + $15} END{print n + 0}'
}

io_calls() { # pid...: read and write system calls so far (syscr + syscw of /proc/PID/io), summed
	local p
	for p in "$@"; do cat "/proc/$p/io"; done | awk '/^sysc[rw]:/{n += $2} END{print n + 0}'
}

num() { # expression: evaluated by bc, printed as a JSON number
	printf '%.3f' "$(echo "$1" | bc -l)"
}

busy_ticks() { # all CPUs' non-idle clock ticks so far
	awk '/^cpu /{print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat
}

# The Redis nodes of the run at hand: their ports and their PIDs.
rports=() rpids=()
each_node() { # redis-cli arguments: run on every node of the run's Redis
	local p
	for p in "${rports[@]}"; do redis-cli -p "$p" "$@"; done
}
redis_info() { # INFO commandstats, memory and keyspace of every node (summarize reads them)
	local p
	for p in "${rports[@]}"; do
		echo "# node 127.0.0.1:$p"
		redis-cli -p "$p" info commandstats
		redis-cli -p "$p" info memory
		redis-cli -p "$p" info keyspace
	done
}

started=
start_redis() { # port [extra redis-server arguments]: start one node; its PID in $started
	local port=$1
	shift
	mkdir -p "$out/redis-$port"
	(cd "$out/redis-$port" && exec "${prio[@]}" timeout 7200 redis-server --bind 127.0.0.1 --port "$port" --save '' \
		--appendonly no --logfile "$out/redis-$port/redis.log" "$@") &
	pids+=("$!")
	wait_port "$port"
	started=$(pgrep -P "$!" | head -1)
}
start_redis $redis_port
redis=$started
redis-server --version >"$out/redis.version"
cluster_pids=()
if $cluster; then
	# Three masters, no replicas (so that the comparison with one Redis is
	# of masters alone), configured as internal/testkit/redistest's clusters.
	seeds=()
	for p in "${cluster_ports[@]}"; do
		rm -f "$out/redis-$p/nodes.conf"
		start_redis "$p" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000
		cluster_pids+=("$started")
		seeds+=("127.0.0.1:$p")
	done
	timeout 60 redis-cli --cluster create "${seeds[@]}" --cluster-replicas 0 --cluster-yes >"$out/cluster.log" 2>&1
	for _ in $(seq 300); do
		ok=0
		for p in "${cluster_ports[@]}"; do
			redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' && ok=$((ok + 1))
		done
		[ $ok = ${#cluster_ports[@]} ] && break
		sleep 0.1
	done
	[ $ok = ${#cluster_ports[@]} ] || { echo "the cluster did not form: $out/cluster.log" >&2; exit 1; }
fi

cat >"$out/machine.json" <<JSON
{"date": "$(date -u +%Y-%m-%d)", "nproc": $(nproc), "cpu_model": "$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)",
 "mem_gb": $(awk '/^MemTotal/{printf "%.0f", $2 / 1048576}' /proc/meminfo), "kernel": "$(uname -r)", "go": "$(go version | awk '{print $3}')",
 "redis": "$(awk '{print $3}' "$out/redis.version" | cut -d= -f2)", "rounds": $rounds, "duration": "$duration", "warmup": "$warmup",
 "c": $c, "keys": $keys, "targets": "${targets[*]}", "targets_env": "${TARGETS:-}", "profile": "${PROFILE:-}", "sluice_env": "${SLUICE_ENV:-}", "incumbent": $([ -n "${INCUMBENT_BIN:-}" ] && echo true || echo false)}
JSON

# run NAME ROUND SERVER-KIND CONF CONCURRENCY [bench flags...]
# SERVER-KIND is noop, noop-redis, memory, redis, incumbent, redis-cluster or
# incumbent-cluster.
run() {
	local name=$1 round=$2 kind=$3 conf=$4 conc=$5
	shift 5
	local pid port url=127.0.0.1:$redis_port rtype=single pprof=
	rports=($redis_port) rpids=("$redis")
	case $kind in *-cluster)
		rports=("${cluster_ports[@]}") rpids=("${cluster_pids[@]}") url=$(IFS=,; echo "${seeds[*]}") rtype=cluster
		kind=${kind%-cluster}
		;;
	esac
	if [ "$kind" = redis ] || [ "$kind" = incumbent ]; then each_node flushall >/dev/null; fi
	case $kind in
	noop)
		"${prio[@]}" timeout $server_limit "$out/bin/sluice-bench" noop --addr 127.0.0.1:$noop_port --for ${load_limit}s 2>"$out/$name.$round.server.log" &
		pid=$! port=$noop_port
		;;
	noop-redis)
		"${prio[@]}" timeout $server_limit "$out/bin/sluice-bench" noop --addr 127.0.0.1:$noop_port --for ${load_limit}s \
			--redis $url 2>"$out/$name.$round.server.log" &
		pid=$! port=$noop_port
		;;
	memory | redis)
		"${prio[@]}" env GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc_port HOST=127.0.0.1 PORT=$http_port LOG_LEVEL=warn \
			SLUICE_ADMIN_ADDR=127.0.0.1:$admin_port BACKEND_TYPE=$kind REDIS_TYPE=$rtype REDIS_URL="$url" REDIS_SOCKET_TYPE=tcp ${SLUICE_ENV:-} \
			$target_env timeout $server_limit "$out/bin/sluice" serve --config "$out/$conf" >"$out/$name.$round.server.log" 2>&1 &
		pid=$! port=$grpc_port pprof=127.0.0.1:$admin_port
		;;
	incumbent)
		# Loopback only; no statsd; the config read once from $out/inc-$conf.
		# On a cluster, the write flush interval its settings call required
		# there (150-500us recommended).
		local window=0
		if [ $rtype = cluster ]; then window=150us; fi
		"${prio[@]}" env HOST=127.0.0.1 PORT=$http_port GRPC_HOST=127.0.0.1 GRPC_PORT=$grpc_port \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT=$debug_port LOG_LEVEL=warn USE_STATSD=false \
			RUNTIME_ROOT="$out/inc-$conf" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_TYPE=$rtype REDIS_URL="$url" REDIS_PIPELINE_WINDOW=$window \
			timeout $server_limit "$out/bin/incumbent" >"$out/$name.$round.server.log" 2>&1 &
		pid=$! port=$grpc_port pprof=127.0.0.1:$debug_port
		;;
	esac
	pids+=("$pid")
	wait_port $port
	local server before after rbefore rafter bbefore bafter t0 t1 load iobefore ioafter riobefore rioafter peak
	server=$(pgrep -P "$pid" | head -1) # the server under timeout(1): its CPU time is the one to read
	each_node config resetstat >/dev/null
	redis_info >"$out/$name.$round.redis-start.txt"
	before=$(cpu_ticks "$server") rbefore=$(cpu_ticks "${rpids[@]}") bbefore=$(busy_ticks) t0=$(date +%s.%N)
	iobefore=$(io_calls "$server") riobefore=$(io_calls "${rpids[@]}")
	load=$(cut -d' ' -f1 /proc/loadavg)
	local profiler=
	if [ -n "${PROFILE:-}" ] && [ -n "$pprof" ]; then
		# The server's CPU profile, PROFILE seconds from the end of the warm-up.
		(sleep "$warmup" && exec timeout $load_limit curl -sf -o "$out/$name.$round.pprof" \
			"http://$pprof/debug/pprof/profile?seconds=$PROFILE") &
		profiler=$!
		pids+=("$profiler")
	fi
	"${prio[@]}" timeout $load_limit "$out/bin/sluice-bench" --addr 127.0.0.1:$port --duration "$duration" --warmup "$warmup" \
		-c "$conc" --keys "$keys" --quiet "$@" >"$out/$name.$round.json"
	if [ -n "$profiler" ]; then wait "$profiler" || echo "$name round $round: no CPU profile" >&2; fi
	if [ "$kind" = memory ] || [ "$kind" = redis ]; then # sluice's own counters (the denial cache's hits)
		timeout 10 curl -sf -o "$out/$name.$round.metrics.txt" "http://127.0.0.1:$http_port/metrics" ||
			echo "$name round $round: no metrics" >&2
	fi
	after=$(cpu_ticks "$server") rafter=$(cpu_ticks "${rpids[@]}") bafter=$(busy_ticks) t1=$(date +%s.%N)
	ioafter=$(io_calls "$server") rioafter=$(io_calls "${rpids[@]}")
	peak=$(awk '/^VmHWM:/ { printf "%.0f\n", $2 * 1024 }' "/proc/$server/status" 2>/dev/null || echo 0)
	redis_info >"$out/$name.$round.redis.txt"
	# CPU seconds over the bench process's lifetime (warm-up included): the
	# server, redis-server, the load generator, and every other process on
	# the machine (other work competing for the same cores).
	local hz client
	hz=$(getconf CLK_TCK)
	client=$(grep -o '"client_cpu_s":[0-9.e-]*' "$out/$name.$round.json" | cut -d: -f2)
	cat >"$out/$name.$round.cpu.json" <<JSON
{"wall_s": $(num "$t1 - $t0"), "server_cpu_s": $(num "($after - $before) / $hz"), "redis_cpu_s": $(num "($rafter - $rbefore) / $hz"), "client_cpu_s": $(num "$client"), "others_cpu_s": $(num "($bafter - $bbefore - ($after - $before) - ($rafter - $rbefore)) / $hz - $client"), "server_syscalls": $((ioafter - iobefore)), "redis_syscalls": $((rioafter - riobefore)), "server_peak_rss_bytes": ${peak:-0}, "redis_nodes": ${#rports[@]}, "loadavg_before": $load}
JSON
	stop "$pid"
	echo "$name round $round: $(grep -o '"throughput_rps":[0-9.]*' "$out/$name.$round.json")" >&2
}

start=$(date +%s)
for round in $(seq "$rounds"); do
	for t in "${targets[@]}"; do
		base=$t conc=$c
		case $t in *-c[0-9]*) base=${t%-c*} conc=${t##*-c} ;; esac
		one=(--descriptor 'remote_address={ip}')
		three=(--descriptor 'a={ip}' --descriptor 'b={ip}' --descriptor 'c={ip}')
		attack=(--attack-keys 4 --attack-share 0.3)
		target_env= # settings of this target only, after SLUICE_ENV
		case $base in
		redis1nc) target_env=SLUICE_REDIS_COALESCE=false base=redis1 ;;
		redis1nm) target_env=SLUICE_REDIS_MERGE=false base=redis1 ;;
		redis1ev) target_env=SLUICE_REDIS_FUNCTIONS=false base=redis1 ;;
		memorynw) target_env=SLUICE_GRPC_STREAM_WORKERS=0 base=memory ;;
		attacknc) target_env=SLUICE_LOCAL_CACHE=false base=attack ;;
		redis1dw) target_env=SLUICE_GRPC_STATIC_WINDOWS=false base=redis1 ;;
		redis1gf) target_env=SLUICE_GC_HEAP_FLOOR_BYTES=0 base=redis1 ;;
		esac
		case $base in
		noop) run "$t" "$round" noop conf1 "$conc" "${one[@]}" ;;
		noopredis) run "$t" "$round" noop-redis conf1 "$conc" "${one[@]}" ;;
		memory) run "$t" "$round" memory conf1 "$conc" "${one[@]}" ;;
		redis1) run "$t" "$round" redis conf1 "$conc" "${one[@]}" ;;
		redis1cl) run "$t" "$round" redis-cluster conf1 "$conc" "${one[@]}" ;;
		redis3) run "$t" "$round" redis conf3 "$conc" "${one[@]}" ;;
		redis3fw) run "$t" "$round" redis conf3fw "$conc" "${one[@]}" ;;
		redis6fw) run "$t" "$round" redis conf6fw "$conc" "${one[@]}" ;;
		redis3d) run "$t" "$round" redis conf3d "$conc" "${three[@]}" ;;
		redis3dcl) run "$t" "$round" redis-cluster conf3d "$conc" "${three[@]}" ;;
		redis5d) run "$t" "$round" redis conf5d "$conc" "${d5[@]}" ;;
		redis10d) run "$t" "$round" redis conf10d "$conc" "${d10[@]}" ;;
		attack) run "$t" "$round" redis conf1 "$conc" "${one[@]}" "${attack[@]}" ;;
		inc1) run "$t" "$round" incumbent conf1 "$conc" "${one[@]}" ;;
		inc1cl) run "$t" "$round" incumbent-cluster conf1 "$conc" "${one[@]}" ;;
		inc3) run "$t" "$round" incumbent conf3d "$conc" "${three[@]}" ;;
		inc3cl) run "$t" "$round" incumbent-cluster conf3d "$conc" "${three[@]}" ;;
		inc5) run "$t" "$round" incumbent conf5d "$conc" "${d5[@]}" ;;
		inc10) run "$t" "$round" incumbent conf10d "$conc" "${d10[@]}" ;;
		incattack) run "$t" "$round" incumbent conf1 "$conc" "${one[@]}" "${attack[@]}" ;;
		*) echo "unknown target $t" >&2; exit 2 ;;
		esac
	done
done
echo "{\"elapsed_s\": $(($(date +%s) - start))}" >"$out/elapsed.json"
