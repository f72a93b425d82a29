#!/bin/sh
# kdet-postgresql's entrypoint: on the first start (PGDATA holds no cluster)
# make a cluster whose superuser is POSTGRES_USER with the password
# POSTGRES_PASSWORD and a database POSTGRES_DB, reachable over TCP with
# scram-sha-256 only; then run the server in the foreground (it receives the
# container's signals: SIGINT is a fast shutdown). The official postgres
# image's conventions, written afresh for Debian's PostgreSQL 15.
#
#   POSTGRES_PASSWORD  required on the first start
#   POSTGRES_USER      the superuser (default postgres)
#   POSTGRES_DB        the database made on the first start (default: POSTGRES_USER)
#   PGDATA             the cluster's directory (default /var/lib/postgresql/data)
# Arguments, if any, go to postgres (e.g. -c max_connections=200).
set -eu

log() { printf 'kdet-postgresql: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

PGDATA="${PGDATA:-/var/lib/postgresql/data}"
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
export PGDATA

[ "$(id -u)" != 0 ] || die "runs as the postgres user (uid 999), not root"
case "$POSTGRES_USER$POSTGRES_DB" in
*[!A-Za-z0-9_]*) die "POSTGRES_USER and POSTGRES_DB: letters, digits and _ only" ;;
esac

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	[ -n "${POSTGRES_PASSWORD:-}" ] || die "PGDATA=$PGDATA holds no cluster and POSTGRES_PASSWORD is empty: set it for the first start"
	mkdir -p "$PGDATA" || die "cannot create $PGDATA (is the volume writable by uid $(id -u)?)"
	chmod 0700 "$PGDATA" || die "cannot chmod $PGDATA to 0700 (is the volume owned by uid $(id -u)?)"
	[ -z "$(ls -A "$PGDATA")" ] || die "$PGDATA is not empty but holds no cluster (PG_VERSION missing): refusing to touch it"
	log "first start: initdb in $PGDATA (superuser $POSTGRES_USER, database $POSTGRES_DB)"
	# The password goes through a pipe, never a file or the command line.
	printf '%s\n' "$POSTGRES_PASSWORD" | initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" \
		--pwfile=/dev/stdin --auth-local=trust --auth-host=scram-sha-256 \
		--encoding=UTF8 --locale=C.UTF-8 >&2
	{
		echo "# kdet-postgresql: every TCP client with a password (scram-sha-256)"
		echo "host all all all scram-sha-256"
	} >>"$PGDATA/pg_hba.conf"
	{
		echo "listen_addresses = '*'"
		echo "unix_socket_directories = '/var/run/postgresql'"
	} >>"$PGDATA/postgresql.conf"
	if [ "$POSTGRES_DB" != postgres ]; then
		echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" |
			postgres --single -D "$PGDATA" postgres >/dev/null ||
			die "CREATE DATABASE $POSTGRES_DB failed"
	fi
	log "first start: done"
fi
exec postgres -D "$PGDATA" "$@"
