"""Why one request for speech could not be served, in the service's own terms: no status code, header or frame in
them. Each transport words them for its clients (`app.api.errors.to_api_error`): HTTP as a status and an
OpenAI-shaped body, the WebSocket as an `error` message and a close code."""

from __future__ import annotations


class SpeechError(Exception):
    """A request that cannot be served, said in the words its client reads (`message`). `server_fault`: the server
    could not serve it (over HTTP a 5xx), rather than the request or the load being refused."""

    server_fault = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Refused(SpeechError):
    """A request field this server, this engine or this deployment cannot honour: `param` names it."""

    def __init__(self, param: str, message: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class UnknownModel(Refused):
    """`model` names no model this server serves."""

    def __init__(self, message: str) -> None:
        super().__init__("model", message, "model_not_found")


class EngineFailed(SpeechError):
    """The engine failed for good (it never started, or it died): only a restart of the server mends it, so no retry
    here; another replica may serve."""

    server_fault = True

    def __init__(self, detail: str) -> None:
        super().__init__(f"The speech engine has failed ({detail}); this server needs a restart. Retry on another one.")
        self.detail = detail


class Unavailable(SpeechError):
    """The engine is loading, warming up or gone (`detail` says which): worth a retry, here or on another replica."""

    server_fault = True

    def __init__(self, detail: str) -> None:
        super().__init__(f"The speech engine is not ready ({detail}). Retry shortly.")
        self.detail = detail


class Stopped(SpeechError):
    """The server ended the work: its deadline passed (`timeout`), or a drain stopped it (`drain`, or the reason the
    lifecycle gave)."""

    server_fault = True

    def __init__(self, reason: str) -> None:
        message = (
            "The synthesis took longer than the server allows."
            if reason == "timeout"
            else "The server is shutting down; retry on another replica."
        )
        super().__init__(message)
        self.reason = reason

    @property
    def by_drain(self) -> bool:
        """A drain stopped it (any reason but the deadline): the server's doing, but no failure of its own."""
        return self.reason != "timeout"


class ShuttingDown(Stopped):
    """New work refused before it started: the server drains (the client should retry on another replica)."""

    def __init__(self) -> None:
        super().__init__("draining")


class Full(SpeechError):
    """No slot: the queue is full (`queue_full`) or no slot freed in time (`queue_timeout`); a retry after
    `retry_after_s` seconds should succeed."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        message = (
            "The server is at capacity and its queue is full."
            if reason == "queue_full"
            else "The server is at capacity and no slot freed in time."
        )
        super().__init__(f"{message} Retry after {retry_after_s} s.")
        self.reason = reason
        self.retry_after_s = retry_after_s


class Failed(SpeechError):
    """The synthesis failed for a reason of the server's own (logged where it happened, under `request_id`)."""

    server_fault = True

    def __init__(self, request_id: str) -> None:
        super().__init__(f"The server had an error while processing your request. Request id: {request_id}.")
        self.request_id = request_id


def invalid_value(param: str, detail: str) -> str:
    """How a value a field cannot take is worded, wherever it is found: "Invalid value for 'speed': <detail>."."""
    return f"Invalid value for '{param}': {detail}."


def characters(count: int) -> str:
    return f"{count} {'character' if count == 1 else 'characters'}"


def too_many_characters(param: str, limit: int, length: int) -> str:
    """The words for a string over its limit of characters, wherever the limit is checked (the schema's, an
    engine's), refused with the code `string_too_long`."""
    return invalid_value(param, f"at most {characters(limit)}, not {length}")
