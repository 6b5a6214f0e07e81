"""The service's one error shape: ``{"error": {"type", "message", "status"}}``."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from selfrag_core.serve.responses import FastJSONResponse

#: the error type sent with each status when no more specific one applies
ERROR_TYPES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    422: "validation_error",
    500: "internal_error",
    501: "not_supported",
    502: "upstream_error",
    503: "overloaded",
    504: "gateway_timeout",
}

#: the only message an unexpected error shows a client (the details go to the log)
INTERNAL_ERROR = "internal error; the server log has the details"
#: the error type of a 500 caused by the server's setup (a ConfigurationError of the
#: backend or the LLM), whose message names the component and the fix
CONFIGURATION_ERROR = "configuration_error"


def error_body(status: int, message: str, type_: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "error": {"type": type_ or ERROR_TYPES.get(status, "error"), "message": message, "status": status},
        **extra,
    }


def error_response(
    status: int,
    message: str,
    type_: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    return FastJSONResponse(error_body(status, message, type_, **extra), status_code=status, headers=headers)
