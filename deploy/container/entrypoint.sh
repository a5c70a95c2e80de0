#!/bin/sh
# kvatlas-server's entrypoint in the container image: derives the server's raft id and the
# cluster's initial voters from the host name and starts the server (docs/operations.md
# §Kubernetes). The host name is NAME-ORDINAL: a StatefulSet pod (kvatlas-2) or a compose
# service's `hostname:`. The server with ordinal N has raft id N+1 (ids start at 1).
#
#   KVATLAS_INITIAL_MEMBERS  the initial voters: ordinals 0..M-1 (default 3). A server with
#                            a higher ordinal joins the running cluster: it starts with
#                            --raft-listen (its own address) and waits for
#                            POST /v1/cluster/members.
#   KVATLAS_PEER_DOMAIN      appended to NAME-ORDINAL to form a server's host name, e.g.
#                            kvatlas-peers.default.svc.cluster.local (the headless
#                            Service); empty = the bare NAME-ORDINAL (compose).
#   KVATLAS_RAFT_PORT        the raft port (default 7072); the server binds 0.0.0.0 on it.
#   KVATLAS_CONFIG           the JSON config file (default /etc/kvatlas/kvatlas.json).
#   KVATLAS_DRY_RUN=1        print the server's argv, one argument a line, instead of
#                            starting it (tests/deploy/entrypoint_test.py).
#
# Further arguments are passed to kvatlas-server after the derived ones (a flag given
# twice: the last one wins).
set -eu

# Kubernetes and compose set HOSTNAME in the container's environment.
# shellcheck disable=SC3028
host="${HOSTNAME:-$(hostname)}"
members="${KVATLAS_INITIAL_MEMBERS:-3}"
domain="${KVATLAS_PEER_DOMAIN:-}"
port="${KVATLAS_RAFT_PORT:-7072}"
config="${KVATLAS_CONFIG:-/etc/kvatlas/kvatlas.json}"

fail() {
  echo "kvatlas entrypoint: $*" >&2
  exit 2
}

name="${host%-*}"
ordinal="${host##*-}"
case "$ordinal" in
  '' | *[!0-9]*) fail "host name \"$host\" is not NAME-ORDINAL (e.g. kvatlas-0)" ;;
esac
if [ "$name" = "$host" ] || [ -z "$name" ]; then
  fail "host name \"$host\" is not NAME-ORDINAL (e.g. kvatlas-0)"
fi
case "$members" in
  '' | *[!0-9]* | 0) fail "KVATLAS_INITIAL_MEMBERS=\"$members\" must be a positive integer" ;;
esac
case "$port" in
  '' | *[!0-9]*) fail "KVATLAS_RAFT_PORT=\"$port\" must be a port number" ;;
esac
# "08" -> 8 (shell arithmetic reads a leading 0 as octal).
while [ "${ordinal#0}" != "$ordinal" ] && [ -n "${ordinal#0}" ]; do ordinal="${ordinal#0}"; done

address() {  # the raft address of the server with ordinal $1
  if [ -n "$domain" ]; then
    echo "$name-$1.$domain:$port"
  else
    echo "$name-$1:$port"
  fi
}

peers=""
i=0
while [ "$i" -lt "$members" ]; do
  peers="$peers${peers:+,}$((i + 1))@$(address "$i")"
  i=$((i + 1))
done

if [ "$ordinal" -ge "$members" ]; then
  # Not an initial voter: it joins the running cluster (docs/operations.md §Kubernetes).
  set -- --raft-listen "$(address "$ordinal")" "$@"
fi
set -- kvatlas-server --config "$config" --id "$((ordinal + 1))" --peers "$peers" \
  --raft-bind "0.0.0.0:$port" "$@"

if [ "${KVATLAS_DRY_RUN:-0}" = 1 ]; then
  for arg in "$@"; do printf '%s\n' "$arg"; done
  exit 0
fi
exec "$@"
