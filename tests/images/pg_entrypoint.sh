#!/usr/bin/env bash
# kdet-postgresql's entrypoint (images/postgresql/entrypoint.sh) run on this
# machine's PostgreSQL 15, as an unprivileged user, the way the image runs it:
# the first start makes the cluster (superuser, password, database), refuses
# without a password, a non-empty foreign directory, root or a bad name; the
# server takes TCP clients with the password only; SIGINT stops it; a second
# start keeps the data and does not initialise again.
# Prints `N passed, N failed`.
set -u
KD_SRC=${KD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
EP=$KD_SRC/images/postgresql/entrypoint.sh
PGBIN=/usr/lib/postgresql/15/bin
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1${2:+: $2}"; }
if [[ ! -x "$PGBIN/initdb" ]]; then
	bad "PostgreSQL 15 server binaries in $PGBIN (make deps installs postgresql)"
	echo "$pass passed, $fail failed"
	exit 1
fi
T=$(mktemp -d "${TMPDIR:-/tmp}/kdet-pgep.XXXXXX")
chmod 0755 "$T"
server_pid=""
cleanup() {
	[[ -z "$server_pid" ]] || kill -KILL "$server_pid" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
# as_user CMD...: exec CMD as the unprivileged user when root (CI), else as we
# are. An exec, so that a background `ep ... &` is the server itself: its pid
# is the one to signal.
as_user() {
	if [[ "$(id -u)" == 0 ]]; then
		exec setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$T" "$@"
	else
		exec "$@"
	fi
}
mkdir -p "$T/sock"
[[ "$(id -u)" == 0 ]] && chown 65534:65534 "$T/sock"
port=$((20000 + RANDOM % 30000))
# ep ENV... : the entrypoint with the image's PATH, listening on 127.0.0.1 only
# (in a subshell: $(ep ...) or ep ... &).
ep() {
	as_user env -i PATH="$PGBIN:/usr/bin:/bin" PGDATA="$T/data/pgdata" "$@" "$EP" \
		-c listen_addresses=127.0.0.1 -c port="$port" -c unix_socket_directories="$T/sock" -c fsync=off
}
psql_tcp() { PGPASSWORD="$1" PGCONNECT_TIMEOUT=5 "$PGBIN/psql" -h 127.0.0.1 -p "$port" -U kdet -d kdet -tAc "$2" 2>&1; }
wait_ready() {
	for _ in $(seq 1 100); do
		"$PGBIN/pg_isready" -h 127.0.0.1 -p "$port" -q && return 0
		sleep 0.1
	done
	return 1
}
mkdir -p "$T/data"
[[ "$(id -u)" == 0 ]] && chown 65534:65534 "$T/data"

# Refusals: nothing is made.
out=$(ep POSTGRES_USER=kdet 2>&1)
if [[ $? -ne 0 && "$out" == *POSTGRES_PASSWORD* && ! -e "$T/data/pgdata/PG_VERSION" ]]; then ok "first start without POSTGRES_PASSWORD: refused, naming it"; else bad "first start without POSTGRES_PASSWORD refused" "$out"; fi
out=$(ep POSTGRES_USER="kdet;drop" POSTGRES_PASSWORD=x 2>&1)
if [[ $? -ne 0 && "$out" == *"letters, digits and _"* ]]; then ok "a POSTGRES_USER with other characters: refused"; else bad "a bad POSTGRES_USER refused" "$out"; fi
mkdir -p "$T/data/pgdata" && echo keep >"$T/data/pgdata/mine"
[[ "$(id -u)" == 0 ]] && chown -R 65534:65534 "$T/data/pgdata"
out=$(ep POSTGRES_USER=kdet POSTGRES_PASSWORD=secret 2>&1)
if [[ $? -ne 0 && "$out" == *"not empty"* && "$(cat "$T/data/pgdata/mine")" == keep ]]; then ok "a non-empty PGDATA without a cluster: refused, its file untouched"; else bad "a non-empty PGDATA refused" "$out"; fi
rm -rf "$T/data/pgdata"
if [[ "$(id -u)" == 0 ]]; then
	out=$(env -i PATH="$PGBIN:/usr/bin:/bin" PGDATA="$T/data/pgdata" POSTGRES_PASSWORD=x "$EP" 2>&1)
	if [[ $? -ne 0 && "$out" == *"not root"* ]]; then ok "as root: refused"; else bad "as root: refused" "$out"; fi
fi

# The first start.
ep POSTGRES_USER=kdet POSTGRES_PASSWORD=secret POSTGRES_DB=kdet >"$T/first.log" 2>&1 &
server_pid=$!
if wait_ready; then ok "first start: the server accepts connections"; else bad "first start: the server accepts connections" "$(tail -c 600 "$T/first.log")"; fi
[[ -s "$T/data/pgdata/PG_VERSION" ]] && ok "first start: a cluster in PGDATA" || bad "first start: a cluster in PGDATA"
out=$(psql_tcp secret "select current_user, current_database()")
[[ "$out" == "kdet|kdet" ]] && ok "TCP with the password: user kdet, database kdet" || bad "TCP with the password" "$out"
out=$(psql_tcp wrong "select 1")
[[ "$out" == *"password authentication failed"* ]] && ok "TCP with a wrong password: refused" || bad "TCP with a wrong password: refused" "$out"
out=$(psql_tcp secret "select pg_get_userbyid(datdba) from pg_database where datname = 'kdet'")
[[ "$out" == kdet ]] && ok "the database kdet belongs to kdet" || bad "the database kdet belongs to kdet" "$out"
grep -q "$(printf 'secret')" "$T/data/pgdata/postgresql.conf" "$T/data/pgdata/pg_hba.conf" 2>/dev/null &&
	bad "the password is nowhere in the cluster's config files" || ok "the password is nowhere in the cluster's config files"
psql_tcp secret "create table kept (v int); insert into kept values (42)" >/dev/null
kill -INT "$server_pid"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
[[ $rc -eq 0 ]] && ok "SIGINT: a fast shutdown, exit 0" || bad "SIGINT: exit 0" "exit $rc: $(tail -c 300 "$T/first.log")"

# The second start: no initdb, the data kept, no password needed.
ep POSTGRES_USER=kdet >"$T/second.log" 2>&1 &
server_pid=$!
if wait_ready; then ok "second start without POSTGRES_PASSWORD: the server runs"; else bad "second start: the server runs" "$(tail -c 600 "$T/second.log")"; fi
grep -q "first start" "$T/second.log" && bad "second start: no initdb" "$(head -c 300 "$T/second.log")" || ok "second start: no initdb"
out=$(psql_tcp secret "select v from kept")
[[ "$out" == 42 ]] && ok "second start: the data is kept" || bad "second start: the data is kept" "$out"
kill -INT "$server_pid"
wait "$server_pid"
server_pid=""

echo "$pass passed, $fail failed"
((fail == 0))
