#!/bin/sh
# Forms a Redis Cluster from the nodes in REDIS_NODES ("host:port ...", each
# started with cluster-enabled yes): with six nodes and
# REDIS_CLUSTER_REPLICAS=1 (the default), three masters with one replica
# each. Waits for every node to answer first, and exits 0 at once when the
# nodes already form a healthy cluster, so running it again is harmless.
#
# Used by docker-compose.yml's redis-cluster-init service (image redis:7);
# examples/examplestest runs it against real redis-server processes.
set -eu

nodes=${REDIS_NODES:?set REDIS_NODES to the cluster nodes, host:port separated by spaces}
replicas=${REDIS_CLUSTER_REPLICAS:-1}
wait_seconds=${REDIS_WAIT_SECONDS:-60}

# cli HOST:PORT ARGS... runs redis-cli against one node.
cli() {
  node=$1
  shift
  redis-cli -h "${node%:*}" -p "${node##*:}" "$@"
}

# healthy HOST:PORT reports whether the node sees a healthy cluster.
healthy() {
  cli "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'
}

# settled reports whether every node sees a healthy cluster of all the
# nodes (gossip has reached everyone).
settled() {
  for node in $nodes; do
    info=$(cli "$node" cluster info 2>/dev/null | tr -d '\r') || return 1
    echo "$info" | grep -qx 'cluster_state:ok' || return 1
    echo "$info" | grep -qx "cluster_known_nodes:$count" || return 1
  done
}

# answers HOST:PORT reports whether the node answers PING.
answers() {
  cli "$1" ping >/dev/null 2>&1
}

# wait_for WHAT COMMAND...: runs COMMAND once a second until it succeeds;
# after $wait_seconds tries it gives up, saying WHAT went wrong.
wait_for() {
  what=$1
  shift
  i=0
  until "$@"; do
    i=$((i + 1))
    if [ "$i" -ge "$wait_seconds" ]; then
      echo "redis-cluster-init: $what" >&2
      exit 1
    fi
    sleep 1
  done
}

for node in $nodes; do
  wait_for "$node does not answer PING" answers "$node"
done

# shellcheck disable=SC2086 # nodes is a list
set -- $nodes
first=$1
count=$#
if healthy "$first"; then
  echo "redis-cluster-init: cluster already formed"
  exit 0
fi

# redis-cli --cluster create wants IPv4 addresses, not names: resolve them.
addrs=""
for node in $nodes; do
  host=${node%:*}
  ip=$(getent ahostsv4 "$host" | { read -r a _ && echo "$a"; }) || true
  if [ -z "$ip" ]; then
    echo "redis-cluster-init: cannot resolve $host" >&2
    exit 1
  fi
  addrs="$addrs $ip:${node##*:}"
done

# shellcheck disable=SC2086 # addrs is a list
redis-cli --cluster create $addrs --cluster-replicas "$replicas" --cluster-yes

wait_for "cluster did not settle" settled
echo "redis-cluster-init: cluster formed"
