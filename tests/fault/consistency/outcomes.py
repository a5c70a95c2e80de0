"""What a write's answer says about whether it was applied: ok, failed (definitely not
applied) or unknown. Decided from the server's code, conservatively (in doubt: unknown);
docs/consistency.md §Outcomes prints this table.

A write is applied iff its batch is in a raft log entry that commits. The server answers:

- before anything is submitted: decoding and validation (400, 413, 415), access control
  (401, 403), no route (404, 405). Nothing was queued.
- 429 resource_exhausted: the applier refused to queue the batch (queue full, or writes
  refused for low disk: Applier::TrySubmitAsync). Nothing was queued.
- 421 not_leader: the raft loop refused the proposal before appending it (CheckLeading,
  raft_apply's RAFT_NOTLEADER: server/replication/raft_log.cc), or a server did not forward
  it (it had been forwarded already, or it is an internal call: server/api/forwarding.cc).
  Nothing was appended.
- 503 unavailable: leadership lost after the entry was appended ("may or may not be
  applied"), a forward whose connection failed after sending, an HTTP server at its
  connection cap: unknown. Except, failed, when the message shows nothing was queued or
  sent: the applier refused it ("the server is shutting down", "... stopped taking writes
  after a storage failure": Applier::TrySubmitAsync), a follower that could open no
  connection to any leader within apply_timeout_ms ("not the leader, and no leader could
  be forwarded to ..."; a connect that timed out is retried within that hold), or, from
  servers older than that retry, whose one connection attempt timed out ("forwarding to
  the leader ... failed: ConnectionTimeout").
- 504 deadline_exceeded: not applied within apply_timeout_ms; it may still be. Unknown.
- 500: a storage failure after the entry committed, a bug. Unknown.
- no connection could be opened: nothing was sent. Failed. A timeout, a reset or a closed
  connection after the request was sent: unknown.

The binary protocol's client (kvatlas.Client, client/src/leader_redirect.cc) follows
not_leader answers itself, so its errors mean:

- invalid_argument, payload_too_large, unauthenticated, permission_denied: refused before
  anything was queued. Failed.
- resource_exhausted: the server's applier refused to queue it. Failed.
- not_leader: every attempt was refused before appending, except that a resent call (made
  while no leader was known) that runs out of time also reports not_leader ("no leader was
  known within the call's deadline") although it was sent and may be applied: unknown when
  the message says so, failed otherwise.
- unavailable: failed when the message says the call never left — "cannot connect to
  ...", "cannot resolve ...", "not connected (...)": the client fails calls that wait for a
  connection that could not be opened (client/src/client_impl.cc Pump, OnConnectFailed);
  a frame is written only on an open connection. Otherwise (the connection was lost with
  the call in flight, a server's own unavailable after appending): unknown.
- deadline_exceeded, internal, io_error, corruption, cancelled: unknown.
"""

from .model import FAILED, OK, UNKNOWN

# REST status -> outcome of a write (statuses not listed: unknown).
REST = {200: OK, 400: FAILED, 401: FAILED, 403: FAILED, 404: FAILED, 405: FAILED,
        413: FAILED, 415: FAILED, 421: FAILED, 429: FAILED}

# Binary protocol error code (kvatlas.Error.code) -> outcome of a write (others: unknown).
BINARY = {"invalid_argument": FAILED, "payload_too_large": FAILED,
          "unauthenticated": FAILED, "permission_denied": FAILED,
          "resource_exhausted": FAILED, "not_leader": FAILED}
BINARY_NOT_LEADER_UNKNOWN = "no leader was known within the call's deadline"
BINARY_NOT_SENT = ("cannot connect to ", "cannot resolve ", "not connected (")

# REST 503 messages that show the write was neither queued nor sent on.
REST_503_NOT_SENT = ("the server is shutting down",
                     "the server stopped taking writes after a storage failure",
                     "not the leader, and no leader could be forwarded to")
REST_503_CONNECT_TIMEOUT = "failed: ConnectionTimeout"

# A REST call that got no answer: did the request leave?
REFUSED = "connection refused"   # the connection never opened: nothing was sent


def rest(status, message=""):
    """Outcome of a REST write answered `status` with the error `message` (status 0: no
    answer after the request was sent; -1: the connection could not be opened)."""
    if status == -1:
        return FAILED
    if status == 503 and (message.startswith(REST_503_NOT_SENT) or (
            "forwarding to the leader" in message and
            message.endswith(REST_503_CONNECT_TIMEOUT))):
        return FAILED
    return REST.get(status, UNKNOWN)


def binary(code, message=""):
    """Outcome of a binary-protocol write that raised kvatlas.Error(code, message)."""
    if code == "not_leader" and BINARY_NOT_LEADER_UNKNOWN in message:
        return UNKNOWN
    if code == "unavailable" and message.startswith(BINARY_NOT_SENT):
        return FAILED
    return BINARY.get(code, UNKNOWN)


def table_rows():
    """(answer, outcome) rows of the table, for the report and the docs."""
    rows = [(f"REST {s}", o) for s, o in sorted(REST.items())]
    rows += [("REST 503 '" + "...', '".join(REST_503_NOT_SENT) + "...', '... forwarding "
              f"to the leader ... {REST_503_CONNECT_TIMEOUT}'", FAILED),
             ("REST other status (500, 503, 504, ...)", UNKNOWN),
             ("REST connection refused (nothing sent)", FAILED),
             ("REST timeout / reset / closed after sending", UNKNOWN)]
    rows += [(f"binary {c}", o) for c, o in sorted(BINARY.items())]
    rows += [(f"binary not_leader '{BINARY_NOT_LEADER_UNKNOWN}'", UNKNOWN),
             ("binary unavailable '" + "...', '".join(BINARY_NOT_SENT) + "...'", FAILED),
             ("binary other (unavailable, deadline_exceeded, internal, ...)", UNKNOWN)]
    return rows


def self_test():
    cases = [(rest(200), OK), (rest(400), FAILED), (rest(421), FAILED), (rest(429), FAILED),
             (rest(503), UNKNOWN), (rest(504), UNKNOWN), (rest(500), UNKNOWN),
             (rest(0), UNKNOWN), (rest(-1), FAILED),
             (rest(503, "not the leader, and no leader could be forwarded to within "
                        "apply_timeout_ms (3000 ms): no leader is known"), FAILED),
             (rest(503, "not the leader; forwarding to the leader, server 1 at "
                        "10.0.0.1:7200, failed: ConnectionTimeout"), FAILED),
             (rest(503, "not the leader; forwarding to the leader, server 1 at "
                        "10.0.0.1:7200, failed: Read"), UNKNOWN),
             (rest(503, "the write was not committed here (server has lost leadership); "
                        "it may or may not be applied: retry idempotently"), UNKNOWN),
             (binary("not_leader", "not the leader; leader_id=2"), FAILED),
             (binary("not_leader", "x: " + BINARY_NOT_LEADER_UNKNOWN), UNKNOWN),
             (binary("unavailable"), UNKNOWN), (binary("deadline_exceeded"), UNKNOWN),
             (binary("unavailable", "connection lost: Connection reset by peer"), UNKNOWN),
             (binary("unavailable", "cannot connect to 10.0.0.2:7300: Connection refused"),
              FAILED),
             (binary("unavailable", "not connected (unavailable: cannot connect to x)"),
              FAILED),
             (binary("invalid_argument"), FAILED), (binary("resource_exhausted"), FAILED)]
    for i, (got, want) in enumerate(cases):
        assert got == want, f"outcome rule {i}: {got} != {want}"
    return len(cases)
