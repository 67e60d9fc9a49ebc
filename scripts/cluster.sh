#!/usr/bin/env bash
# Local sharelog cluster on loopback: 3 NATS JetStream nodes built from the
# nats-server version pinned in go.mod (works offline once the module is in
# the module cache) and 2 sharelog instances in cluster mode.
#
#   scripts/cluster.sh up     (make cluster)       start, print how to reach it
#   scripts/cluster.sh down   (make cluster-down)  stop everything (data kept)
#   scripts/cluster.sh kill N                      SIGKILL sharelog instance N (1 or 2)
#
# Everything lives under $SHARELOG_CLUSTER_DIR (default .cluster/): binaries,
# configs, NATS stores, logs and pid files. rm -rf it to start afresh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SHARELOG_CLUSTER_DIR:-$root/.cluster}
GO=${GO:-go}
cmd=${1:-up}

running() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_port() { # host port what
	for _ in $(seq 1 100); do
		if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "$3 did not listen on $1:$2; see $dir" >&2
	return 1
}

up() {
	mkdir -p "$dir/bin"
	cd "$root"
	$GO build -o "$dir/bin/nats-server" github.com/nats-io/nats-server/v2
	$GO build -o "$dir/bin/sharelog" ./cmd/server
	$GO build -o "$dir/bin/sharelogctl" ./cmd/sharelogctl
	for i in 1 2 3; do
		if running "$dir/n$i.pid"; then continue; fi
		mkdir -p "$dir/n$i"
		sed "s|@DIR@|$dir|g" "scripts/cluster/nats-n$i.conf" >"$dir/n$i.conf"
		nohup "$dir/bin/nats-server" -c "$dir/n$i.conf" >"$dir/n$i.log" 2>&1 &
		echo $! >"$dir/n$i.pid"
	done
	for i in 1 2 3; do wait_port 127.0.0.1 "422$((i + 1))" "NATS n$i"; done
	for i in 1 2; do
		if running "$dir/sharelog$i.pid"; then continue; fi
		SHARELOG_STORE=jetstream \
			SHARELOG_NATS_URL=nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224 \
			SHARELOG_INSTANCE_ID="sharelog$i" \
			SHARELOG_GRPC_ADDR="127.0.0.1:909$i" SHARELOG_HTTP_ADDR="127.0.0.1:808$i" \
			SHARELOG_DATA_DIR="$dir/sharelog$i" \
			nohup "$dir/bin/sharelog" >"$dir/sharelog$i.log" 2>&1 &
		echo $! >"$dir/sharelog$i.pid"
		wait_port 127.0.0.1 "808$i" "sharelog$i"
	done
	# A fresh NATS cluster elects its JetStream meta leader first: wait
	# until one instance is active, or serves topic changes in
	# partitioned mode (at most 60 s).
	for _ in $(seq 1 300); do
		if curl -s http://127.0.0.1:8081/readyz http://127.0.0.1:8082/readyz 2>/dev/null | grep -qE "cluster: active|serving topic changes"; then break; fi
		sleep 0.2
	done
	cat <<INFO
sharelog cluster up (files in $dir):
  NATS       nats://127.0.0.1:4222,4223,4224   (monitoring http://127.0.0.1:8222..8224)
  sharelog1  gRPC 127.0.0.1:9091  HTTP http://127.0.0.1:8081   log $dir/sharelog1.log
  sharelog2  gRPC 127.0.0.1:9092  HTTP http://127.0.0.1:8082   log $dir/sharelog2.log
Either instance takes any call ($(if [ "${SHARELOG_CLUSTER_MODE:-}" = partitioned ]; then echo "each serves the partitions it owns and forwards the others"; else echo "the standby forwards to the active one"; fi)).
CLI:     $dir/bin/sharelogctl --addr 127.0.0.1:9092 topics list
Roles:   curl -s http://127.0.0.1:8081/readyz http://127.0.0.1:8082/readyz
Fail:    scripts/cluster.sh kill 1    (SIGKILL of sharelog1)
Stop:    make cluster-down
INFO
}

down() {
	for p in sharelog1 sharelog2 n1 n2 n3; do
		if running "$dir/$p.pid"; then
			kill "$(cat "$dir/$p.pid")"
			echo "stopped $p"
		fi
		rm -f "$dir/$p.pid"
	done
}

case $cmd in
up) up ;;
down) down ;;
kill)
	n=${2:?which instance: 1 or 2}
	kill -9 "$(cat "$dir/sharelog$n.pid")"
	rm -f "$dir/sharelog$n.pid"
	echo "killed sharelog$n (SIGKILL)"
	;;
*)
	echo "usage: $0 up|down|kill N" >&2
	exit 2
	;;
esac
