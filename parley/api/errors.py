"""Every error the API answers is JSON ``{"error": "<one line>"}``; this module turns
parley's own exceptions, FastAPI's validation errors and Starlette's HTTP errors into it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from parley.client.speak_queue import DiscussionOver
from parley.shared.approvals import ApprovalClosed, ApprovalNotFound, NotAnApprover
from parley.shared.archive import ArchiveOfAnother
from parley.shared.logs import one_line
from parley.shared.organizations import RoomLimitReached
from parley.shared.spec_limits import SpecTooLarge
from parley.shared.store import RoomChanged, RoomExists, RoomHeld, RoomNotFound
from parley.shared.tasks import TaskNotFound
from parley.shared.tool_catalog import ToolsRefused

log = structlog.get_logger("parley.api")

# Checked in order: the first class an error is an instance of gives its status.
STATUS_OF: tuple[tuple[type[Exception], int], ...] = (
    (RoomNotFound, 404),
    (ArchiveOfAnother, 403),
    (RoomLimitReached, 409),
    (ApprovalNotFound, 404),
    (TaskNotFound, 404),
    (NotAnApprover, 403),
    (ApprovalClosed, 409),
    (RoomExists, 409),
    (RoomHeld, 409),
    (RoomChanged, 409),
    (DiscussionOver, 409),
    (SpecTooLarge, 413),
    (ToolsRefused, 422),
    (ValueError, 400),
)


class ApiError(Exception):
    """A refusal with its HTTP status and one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str, headers: dict[str, str] | None = None
                   ) -> JSONResponse:
    """The API's one error shape."""
    return JSONResponse({"error": one_line(message, 1000)}, status_code=status, headers=headers)


def describe_problems(errors: Sequence[Any], drop_body: bool = True) -> str:
    """pydantic's errors as ``field.path: message`` joined into one line (the request's
    ``body`` prefix left out: the field is named as the client wrote it)."""
    problems = []
    for item in errors:
        loc = [str(part) for part in item.get("loc", ())]
        if drop_body and loc[:1] == ["body"]:
            loc = loc[1:]
        where = ".".join(loc) or "body"
        problems.append(f"{where}: {str(item.get('msg', '')).removeprefix('Value error, ')}")
    return "; ".join(problems)


def not_json(problem: dict[str, Any]) -> str:
    """What FastAPI found wrong with a body that is not JSON, as json.loads says it
    (``Expecting property name enclosed in double quotes at char 1``)."""
    context = problem.get("ctx") or {}
    error = context.get("error", problem.get("msg", ""))
    loc = list(problem.get("loc", ()))
    at = f" at char {loc[1]}" if len(loc) > 1 and isinstance(loc[1], int) else ""
    return f"{error}{at}"


def status_of(error: Exception) -> int | None:
    """The HTTP status for one of parley's own errors; None for anything else."""
    return next((status for kind, status in STATUS_OF if isinstance(error, kind)), None)


def install_handlers(app: FastAPI) -> None:
    """Answer every error raised while handling a request in the API's one shape."""

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, error: ApiError) -> JSONResponse:
        return error_response(error.status, str(error))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, error: RequestValidationError) -> JSONResponse:
        problems = list(error.errors())
        unreadable = [item for item in problems if item.get("type") == "json_invalid"]
        if unreadable:  # a body that is not JSON is malformed (400), not an invalid field
            return error_response(400, f"the body is not valid JSON: {not_json(unreadable[0])}")
        return error_response(422, describe_problems(problems))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        message = str(error.detail)
        if error.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        elif error.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        return error_response(error.status_code, message, getattr(error, "headers", None))

    @app.exception_handler(ValidationError)
    async def invalid_data(_request: Request, error: ValidationError) -> JSONResponse:
        return error_response(422, describe_problems(list(error.errors()), drop_body=False))

    @app.exception_handler(redis.RedisError)
    async def redis_error(request: Request, error: redis.RedisError) -> JSONResponse:
        if isinstance(error, redis.ConnectionError | redis.TimeoutError):
            return error_response(503, "Redis is unavailable: try again shortly")
        log.error("redis error", path=request.url.path, error=one_line(str(error)))
        return error_response(500, "Redis refused the request")

    async def parley_error(_request: Request, error: Exception) -> JSONResponse:
        return error_response(status_of(error) or 500, str(error))

    # Each class by itself: a handler of Exception would also have the server log a
    # traceback for what is only a refusal.
    for kind, _status in STATUS_OF:
        app.add_exception_handler(kind, parley_error)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, _error: Exception) -> JSONResponse:
        log.exception("unexpected error", path=request.url.path)
        return error_response(500, "internal error")
