"""JSON as the API reads it, in a request's body and in a WebSocket's messages: Python's own reading, but for a number
with more digits than Python reads into an int (4300, `sys.get_int_max_str_digits`: a bound against conversions that
take seconds). Python gives up on the whole text with a ValueError, which told the client its body was no JSON; it is
JSON, and the refusal names where the number is (`seed`, `items[3].seed`, `extra_params.top_k`), as a value out of
its field's range is named.

The routes that take a JSON body are declared with `JsonBodyRoute`, which reads their bodies so."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.api.errors import ApiError, invalid_param, shown_name
from app.speech.errors import invalid_value


class TooLong:
    """Where a number too long to read was, in the text read again to find it: its count of digits."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


# the most text read a second time to find where a number too long to read is: past it the refusal names no field.
# The second reading calls Python for every number, and the walk visits every value: on a 25-MB body of numbers that
# held the event loop for seconds, where refusing it takes a fraction of one
REREAD_MAX_CHARS = 1 << 20


def loads(text: str | bytes) -> Any:
    """`json.loads(text)`, refusing a number too long to read with a 400 naming where it is (`number_too_long`).
    Any other fault is json.loads' own (a JSONDecodeError, a UnicodeDecodeError, a RecursionError)."""
    try:
        return json.loads(text)  # the C reader, as fast as ever, for every body that has no such number
    except (json.JSONDecodeError, UnicodeDecodeError):  # no JSON, or no text: not a number's doing
        raise
    except ValueError as exc:
        if len(text) > REREAD_MAX_CHARS:
            raise number_too_long(None, None) from exc
        unread = read_past_long_numbers(text)  # raises as json.loads does where the text is no JSON after all
        if unread is None:
            raise
        raise number_too_long(*unread) from exc


def read_past_long_numbers(text: str | bytes) -> tuple[str | None, int] | None:
    """Where the first number too long to read is in `text` (its path, None where it cannot be told: a key given
    twice; its digits); None where there is none."""
    limit = sys.get_int_max_str_digits()
    found: list[TooLong] = []

    def parse_int(literal: str) -> int | TooLong:
        digits = len(literal) - literal.startswith("-")
        if limit and digits > limit:  # 0: no limit
            found.append(TooLong(digits))
            return found[-1]
        return int(literal)

    data = json.loads(text, parse_int=parse_int)
    if not found:
        return None
    return path_to(data, found[0]), found[0].digits


def _entries(value: dict[str, Any] | list[Any]) -> Iterator[tuple[str | int, Any]]:
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def _within(path: str, key: str | int) -> str:
    """The path of `key` within the value at `path`: `items[3]`, `items[3].seed`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{shown_name(key)}" if path else shown_name(key)


def path_to(data: Any, target: object) -> str | None:
    """`target`'s place in `data`, as OpenAI names a field within a body: `items[3].seed`; "" for `data` itself; None
    where it is not there (a key given twice keeps its last value). Walked in the order of the text, without recursion
    (a body may nest as deep as the JSON reader goes, deeper than Python's stack), a path made only for the objects
    and arrays it goes into."""
    if data is target:
        return ""
    stack = [(_entries(data), "")] if isinstance(data, (dict, list)) else []
    while stack:
        entries, path = stack[-1]
        for key, value in entries:
            if value is target:
                return _within(path, key)
            if isinstance(value, (dict, list)):
                stack.append((_entries(value), _within(path, key)))
                break
        else:
            stack.pop()
    return None


def number_too_long(path: str | None, digits: int | None) -> ApiError:
    """The 400 for a number of `digits` digits (None: not counted) at `path` (None: not told; "": the whole text),
    one past any limit of any field: `invalid_value`."""
    limit = sys.get_int_max_str_digits()
    detail = (
        f"a number of {digits} digits, longer than the {limit} this server reads"
        if digits is not None
        else f"a number of more digits than the {limit} this server reads"
    )
    if not path:  # the whole text is that number, or where it is cannot be told: no field to name
        return ApiError(400, f"{detail[0].upper()}{detail[1:]}.", code="invalid_value")
    return invalid_param(path, invalid_value(path, detail))


class JsonBodyRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class JsonBodyRoute(APIRoute):
    """A route whose JSON body is read by `loads`. FastAPI answers any failure to read a body with its own 400 ("There
    was an error parsing the body"), raised from the failure: `app.api.errors` answers with the failure where it is
    an ApiError."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_by_loads(request: Request) -> Response:
            return await handler(JsonBodyRequest(request.scope, request.receive))

        return read_by_loads
