"""kvatlas.Error: every failure of a kvatlas call, carrying the server's error code."""


class Error(Exception):
    """A kvatlas call failed.

    Attributes:
        code: the stable wire name of the error code (docs/api.md §Errors), e.g.
            "unavailable", "invalid_argument", "deadline_exceeded", "not_found",
            "unauthenticated", "permission_denied", "watch_cut", "compacted",
            "wrong_group" (a raft group refused a write part of a context the placement
            directory had just placed elsewhere; resend it, with the writer id if it had one).
        number: the code's stable number (common/.../status_codes.def).
        message: the human-readable reason, naming the field or the endpoint.
    """

    def __init__(self, code: str, number: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.number = number
        self.message = message

    def __reduce__(self):  # picklable (e.g. across a ProcessPoolExecutor)
        return (type(self), (self.code, self.number, self.message))
