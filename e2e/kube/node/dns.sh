#!/bin/bash
# The cluster DNS's data for the real nodes (e2e/kube/node/up.sh): keeps
# HOSTS, the hosts file dnsmasq answers from, equal to the Services that have
# a ClusterIP, one line each, "IP NAME.NAMESPACE.svc.cluster.local", and
# sends dnsmasq SIGHUP (it re-reads the file) after each change. It follows
# the Services with a watch (one kubectl that prints a line per event) and
# rewrites the file once per burst of events, so it costs nothing while no
# Service changes. A watch that ends (the API server closes it, or restarts)
# is started again.
#
# Usage: KUBECONFIG=... e2e/kube/node/dns.sh HOSTS DNSMASQ_PIDFILE
# Runs until SIGTERM.
set -uo pipefail

hosts="${1:?usage: dns.sh HOSTS DNSMASQ_PIDFILE}"
pidfile="${2:?usage: dns.sh HOSTS DNSMASQ_PIDFILE}"
log() { printf 'time=%s level=%s msg="%s"%s\n' "$(date -u +%FT%TZ)" "$1" "$2" "${3:+ $3}"; }

work="$(mktemp -d "${TMPDIR:-/tmp}/kdet-dns.XXXXXX")"
fifo="$work/events"
mkfifo "$fifo"
exec 3<>"$fifo" # read-write: opening never blocks, and the fifo never sees EOF
watch_pid=""
stop() {
	[[ -z "$watch_pid" ]] || kill "$watch_pid" 2>/dev/null
	rm -rf "$work"
	log info "stopped"
	exit 0
}
trap stop TERM INT

# regen: write the hosts file from the Services; SIGHUP dnsmasq if it changed.
regen() {
	local tmp="$work/hosts"
	if ! kubectl get services -A -o \
		'jsonpath={range .items[*]}{.spec.clusterIP} {.metadata.name}.{.metadata.namespace}.svc.cluster.local{"\n"}{end}' \
		2>"$work/err" | awk '$1 ~ /^[0-9.]+$/' | LC_ALL=C sort >"$tmp"; then
		log warn "cannot list services" "err=\"$(head -c 200 "$work/err" | tr '\n"' ' ')\""
		return 1
	fi
	cmp -s "$tmp" "$hosts" && return 0
	cat "$tmp" >"$hosts" # in place: dnsmasq's path stays the same file
	kill -HUP "$(cat "$pidfile")" 2>/dev/null || log warn "cannot signal dnsmasq"
	log info "hosts updated" "services=$(wc -l <"$hosts")"
}

start_watch() {
	kubectl get services -A --watch -o name >&3 2>>"$work/watch.err" &
	watch_pid=$!
}

regen
start_watch
while :; do
	if read -r -t 1 _ <&3; then
		# A burst (the initial list, a namespace deleted): drain it, then one rewrite.
		while read -r -t 0.3 _ <&3; do :; done
		regen
	elif ! kill -0 "$watch_pid" 2>/dev/null; then
		log info "watch ended; starting it again"
		sleep 1
		regen
		start_watch
	fi
done
