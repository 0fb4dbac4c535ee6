"""OpenAI-shaped errors: every non-2xx body is {"error": {"message", "type", "param", "code"}}. `to_api_error` words
every failure of a request for speech (`app.speech.errors`, the engine's own) once, for HTTP and the WebSocket alike.
`error_responses` is the same table for the OpenAPI schema: what each status means, in the body's documented shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.engine_protocol import EngineUnavailable
from app.speech.errors import (
    EngineFailed,
    Failed,
    Full,
    Refused,
    SpeechError,
    Stopped,
    Unavailable,
    UnknownModel,
    characters,
    invalid_value,
    too_many_characters,
)
from app.text.hygiene import text_problem


class ErrorDetail(BaseModel):
    message: str = Field(description="What went wrong, in words meant for the caller.")
    type: str = Field(description="invalid_request_error, requests (rate limits) or server_error.")
    param: str | None = Field(description="The request field at fault, when one is.")
    code: str | None = Field(description="A stable machine-readable code, e.g. model_not_found.")


class ErrorResponse(BaseModel):
    """OpenAI's error body: every non-2xx response has this shape."""

    error: ErrorDetail


_ERRORS = {
    400: "Invalid request: the field at fault is named in `param` (unknown fields are refused too).",
    401: "Missing or wrong API key (when the server has keys): `Authorization: Bearer <key>`.",
    404: "Unknown model or voice.",
    408: "The request body did not arrive within SPEECH_REQUEST_READ_TIMEOUT_S; the connection is closed.",
    409: "A voice of that name already exists.",
    413: "Request body or upload too large.",
    415: "A request body sent with a Content-Encoding (gzip, ...): send it uncompressed.",
    429: "At capacity (queue full or wait too long) or the API key's concurrency limit; see `Retry-After`.",
    503: "The engine is not ready yet, or the server is draining; see `Retry-After`.",
    504: "The synthesis took longer than the server allows (SPEECH_REQUEST_TIMEOUT_S).",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for the errors a route can answer."""
    return {status: {"model": ErrorResponse, "description": _ERRORS[status]} for status in statuses}


INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"


REFUSAL_KEYS = ("type", "code", "param")  # what a log line tells of an error: never its message
CLIENT_LEFT = 499  # the status logged and counted for a request whose client left before its answer (nginx's)


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)

    def naming(self, param: str) -> ApiError:
        """The same error, its `param` the one given (where in a larger body the fault is)."""
        return ApiError(self.status, self.message, type=self.type, param=param, code=self.code, headers=self.headers)

    def refusal(self) -> dict[str, str]:
        """Why, as a request's log line tells it: its type, code and param (those set), never its message (it may
        quote the input)."""
        return {key: value for key in REFUSAL_KEYS if isinstance(value := getattr(self, key), str) and value}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(
    message: str, *, type: str = INVALID_REQUEST, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def invalid_param(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def missing_parameter(param: str, path: str | None = None) -> ApiError:
    """A required field the request (or message) left out; `path` the key within `param`."""
    return ApiError(
        400, f"Missing required parameter: '{path or param}'.", param=param, code="missing_required_parameter"
    )


def unknown_parameter(param: str, path: str | None = None) -> ApiError:
    """A field the request (or message) does not have, as OpenAI words it; `path` the key within `param`. Both are
    the caller's own names, echoed as `shown_name` shows them."""
    message = f"Unrecognized request argument supplied: {shown_name(path or param)}"
    return ApiError(400, message, param=shown_name(param), code="unknown_parameter")


def shown_name(name: str) -> str:
    """A field name the caller sent, as an error may echo it: its first 64 characters, where it is plain text (a
    megabyte of name would come back twice, control characters would reach a terminal or a log viewer)."""
    return name[:64] if text_problem(name) is None else "(a name of unprintable characters)"


def internal_error(request_id: str) -> ApiError:
    return to_api_error(Failed(request_id))


# seconds before a retry is worth it: the engine still starting (or gone), and the server draining (another replica)
RETRY_AFTER_NOT_READY = "5"
RETRY_AFTER_DRAINING = "1"


def to_api_error(exc: BaseException, request_id: str = "") -> ApiError:
    """The one wording of a failure: an ApiError as it is, a request's failure (`app.speech.errors`, and the engine's
    EngineUnavailable mid-stream) as its status, OpenAI error and headers; anything else as the 500 that names
    `request_id` (the caller logs it). The engine's UnsupportedParameter never gets here: `app.speech` turns it into
    `Refused` where it is raised."""
    match exc:
        case ApiError():
            return exc
        case UnknownModel():
            return ApiError(404, exc.message, param=exc.param, code=exc.code)
        case Refused():
            return invalid_param(exc.param, exc.message, exc.code)
        case EngineFailed():
            return ApiError(503, exc.message, type=SERVER_ERROR, code="engine_failed")
        case Unavailable():
            headers = {"Retry-After": RETRY_AFTER_NOT_READY}
            return ApiError(503, exc.message, type=SERVER_ERROR, code="engine_unavailable", headers=headers)
        case EngineUnavailable():  # went away mid-stream: as the 503 a request gets before its first audio
            return to_api_error(Unavailable(str(exc)))
        case Stopped(reason="timeout"):
            return ApiError(504, exc.message, type=SERVER_ERROR, code="timeout")
        case Stopped():  # refused by a drain (ShuttingDown) or stopped by one: retried elsewhere, on a new connection
            headers = {"Retry-After": RETRY_AFTER_DRAINING, "Connection": "close"}
            return ApiError(503, exc.message, type=SERVER_ERROR, code="server_shutting_down", headers=headers)
        case Full():
            headers = {"Retry-After": str(exc.retry_after_s)}
            return ApiError(429, exc.message, type="requests", code="rate_limit_exceeded", headers=headers)
        case Failed():
            return ApiError(500, exc.message, type=SERVER_ERROR, code="internal_error")
    return to_api_error(Failed(request_id))


INVALID_JSON = "We could not parse the JSON body of your request. The body must be a valid JSON object."


def validation_error(errors: Sequence[Any]) -> ApiError:
    """The first pydantic error of a request body, as OpenAI words it, with `param` naming the top-level field."""
    if not errors:
        return ApiError(400, "The request body is invalid.", code="invalid_request")

    def field_loc(error: Any) -> list[Any]:  # FastAPI prefixes body fields with "body"; batch items and messages not
        loc = list(error.get("loc", ()))
        return loc[1:] if loc[:1] == ["body"] else loc

    if field_loc(errors[0])[:1] == ["voice"]:  # `speaker` stands for an omitted `voice`: its fault is its own
        errors = sorted(errors, key=lambda e: field_loc(e)[:1] != ["speaker"])
    # A union field (`voice`: a name or {"id": ...}) reports one error per branch: the deepest names the real fault.
    same_field = [e for e in errors if field_loc(e)[:1] == field_loc(errors[0])[:1]]
    error = max(same_field, key=lambda e: len(field_loc(e)))
    loc = field_loc(error)
    kind = error.get("type", "")
    param = str(loc[0]) if loc and isinstance(loc[0], str) else None
    if kind == "json_invalid":
        return ApiError(400, INVALID_JSON, code="invalid_json")
    if param is None and kind == "string_unicode" and isinstance(name := error.get("input"), str):
        # a key holding a lone surrogate (JSON's "\ud800"): pydantic cannot read it as a name and reports it at the
        # body's place. No field has such a name; it is told by code point, as it cannot be written back as UTF-8
        return ApiError(400, name_not_unicode(name), code="unknown_parameter")
    if param is None:
        body = error.get("input")
        if isinstance(body, bytes):  # not read as JSON: its Content-Type said otherwise
            need = ", sent with Content-Type: application/json"
        elif isinstance(body, str):  # read as JSON, a string: a body encoded twice (`json=json.dumps(...)`)
            need = ", not a JSON string (a body encoded as JSON twice?)"
        else:
            need = ""
        return ApiError(400, f"The request body must be a JSON object{need}.", code="invalid_request")
    # within the field, the key at fault (the last of the location; those between may name a union's branch)
    path = f"{param}.{loc[-1]}" if len(loc) > 1 and isinstance(loc[-1], str) else param
    if kind == "extra_forbidden":
        return unknown_parameter(param, path)
    if kind == "missing":
        return missing_parameter(param, path)
    detail = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    # a lone surrogate in a string pydantic reads itself: said as the other fields' text checks say it, and where
    if kind == "string_unicode" and isinstance(error.get("input"), str):
        detail = text_problem(error["input"]) or detail
    bounds = error.get("ctx") or {}
    code = "invalid_type" if kind.endswith("_type") or kind.endswith("_parsing") else "invalid_value"
    if kind.endswith(("too_long", "too_short")) and isinstance(error.get("input"), str):  # a string: its characters
        too_long = kind.endswith("too_long")
        limit = bounds.get("max_length" if too_long else "min_length")
        if too_long:  # worded and coded as the engine's own limit on `input` is refused
            return invalid_param(param, too_many_characters(param, int(limit), len(error["input"])), "string_too_long")
        detail = f"at least {characters(int(limit))}, not {len(error['input'])}"
    return ApiError(400, invalid_value(param, detail), param=param, code=code)


def name_not_unicode(name: str) -> str:
    """Why a field's name is no name: where its first lone surrogate is."""
    index, half = next(((i, ch) for i, ch in enumerate(name) if "\ud800" <= ch <= "\udfff"), (0, ""))
    where = f"a lone surrogate, U+{ord(half):04X}, at position {index} of the name" if half else "the name"
    return f"Unrecognized request argument supplied: a field name that is not valid Unicode ({where})."


_STATUS_MESSAGES = {404: ("Not found.", "not_found"), 405: ("Method not allowed.", "method_not_allowed")}
# FastAPI's own 400 for a JSON body it could not parse (not UTF-8, nested too deep); Starlette's form parser raises
# 400s of its own, whose messages name their fault
FASTAPI_BODY_PARSE_ERROR = "There was an error parsing the body"


def not_found(request: Request) -> str:
    """A route this server does not have, named as it was asked for. A path with a trailing slash whose route exists
    without it is told so: it is answered so, not redirected (a POST client follows a redirect poorly, without its
    body)."""
    path = request.url.path
    shown = path if len(path) <= 200 else f"{path[:200]}..."
    hint = ""
    if len(path) > 1 and path.endswith("/"):
        bare = {**request.scope, "path": path.rstrip("/")}
        if any(route.matches(bare)[0] is not Match.NONE for route in request.app.router.routes):
            hint = f" Routes have no trailing slash: {shown.rstrip('/')}."
    return f"Not found: {request.method} {shown}.{hint}"


def install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return exc.response()

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return validation_error(exc.errors()).response()

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if isinstance(exc.__cause__, ApiError):  # a body `app.api.json_body` refused to read: FastAPI's 400 from it
            return exc.__cause__.response()
        message, code = _STATUS_MESSAGES.get(exc.status_code, (str(exc.detail), None))
        if exc.status_code == 404:
            message = not_found(request)
        if exc.status_code == 400 and media_type(request) == "multipart/form-data":
            code = "invalid_multipart"  # the form parser's own: its message says what
        elif exc.status_code == 400 and exc.detail == FASTAPI_BODY_PARSE_ERROR:
            message, code = INVALID_JSON, "invalid_json"
        error_type = INVALID_REQUEST if exc.status_code < 500 else SERVER_ERROR
        return ApiError(exc.status_code, message, type=error_type, code=code, headers=exc.headers).response()

    async def on_speech_error(request: Request, exc: Exception) -> JSONResponse:
        return to_api_error(exc, getattr(request.state, "request_id", "")).response()

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(SpeechError, on_speech_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)


def media_type(request: Request) -> str:
    """The request body's media type, lower case, without its parameters ("" where it names none)."""
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


def websocket_error_message(error: ApiError) -> dict[str, Any]:
    """An error as a WebSocket `error` message: vllm-omni clients read `message`; `code`, `param` and `error`
    (OpenAI's error object) say what went wrong; `retry_after` (seconds) when the service is full."""
    message: dict[str, Any] = {"type": "error", "message": error.message, "code": error.code, "param": error.param}
    if error.headers and "Retry-After" in error.headers:
        message["retry_after"] = int(error.headers["Retry-After"])
    message["error"] = error.body()["error"]
    return message
