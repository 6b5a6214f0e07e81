"""The library's exception hierarchy.

Every error the library raises on purpose derives from :class:`RAGSystemError`, so
callers can catch one class. Messages say what went wrong and what to do about it.
"""

from __future__ import annotations

from typing import Any


class RAGSystemError(Exception):
    """Base class of every error raised by selfrag."""

    #: Whether trying the same operation again may succeed.
    retryable: bool = False
    #: LLM attempts a failed call made before it stopped (what the LLM received).
    attempts: int = 0


class LLMCallError(RAGSystemError):
    """Every attempt of an LLM call failed (error, timeout or empty output)."""

    retryable = True

    def __init__(self, message: str, *, attempts: int = 0, purpose: str = "") -> None:
        super().__init__(message)
        self.attempts = attempts
        self.purpose = purpose


class LLMTimeoutError(LLMCallError):
    """An LLM call did not answer within its timeout."""


class RetrievalError(RAGSystemError):
    """The retrieval backend raised, or returned something that cannot be read."""

    retryable = True

    def __init__(self, message: str, *, query: str = "") -> None:
        super().__init__(message)
        self.query = query


class RetrievalTimeoutError(RetrievalError):
    """A retrieval did not answer within ``retrieval_timeout`` (or the query's deadline)."""


class ParseError(RAGSystemError):
    """Model output could not be parsed; ``raw`` keeps the output as it came."""

    def __init__(self, message: str, *, raw: str) -> None:
        super().__init__(message)
        self.raw = raw


class BudgetExceededError(RAGSystemError):
    """A query used up its LLM-call budget (``ExecutionConfig.max_llm_calls``)."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class QueryTimeoutError(RAGSystemError):
    """A query ran past ``ExecutionConfig.query_timeout``."""

    retryable = True


class StrategyError(RAGSystemError):
    """Every attempt of a composed strategy raised; ``report`` tells what happened."""

    def __init__(self, message: str, *, report: Any = None) -> None:
        super().__init__(message)
        self.report = report


class ConfigurationError(RAGSystemError, ValueError):
    """A configuration value is invalid (also a ``ValueError``), or a component (the LLM,
    the backend) failed in a way no retry or fallback can mend: a programming error
    (``TypeError``, ``AttributeError``, ...), rejected credentials, a model or endpoint
    that does not exist. ``component`` names it ("LLM", "backend") when known."""

    def __init__(self, message: str, *, component: str = "") -> None:
        super().__init__(message)
        self.component = component


class InputError(RAGSystemError, ValueError):
    """A request's input is invalid (an argument of a ``selfrag mcp`` tool, ...); the message
    names the argument and what to send instead. Also a ``ValueError``."""


class MissingDependencyError(RAGSystemError, ImportError):
    """An optional dependency is not installed; the message names the extra."""


# ------------------------------------------------------------- classifying faults

#: exception types that are bugs or setup problems, whatever raised them
_PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, NotImplementedError, ImportError, AssertionError)
#: HTTP statuses that no retry mends: unauthorised, forbidden, no such model or endpoint
_SETUP_STATUSES = frozenset({401, 403, 404})
_SETUP_NAMES = ("Authentication", "PermissionDenied", "Unauthorized", "Forbidden", "NotFound")
_MISSING_KEY = ("api_key", "api key")


def _status_of(exc: BaseException) -> int | None:
    for holder in (exc, getattr(exc, "response", None)):
        for name in ("status_code", "status"):
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def misconfiguration_hint(exc: BaseException) -> str | None:
    """What to fix when ``exc`` (raised by an LLM client or a backend) is a programming
    or configuration error rather than a transient fault; None for a transient fault
    (timeouts, connection resets, rate limits, 5xx and anything unrecognised), which
    gets retries and the specified fallback instead.

    Recognised without importing any client library: the programming-error types
    (``TypeError``, ``AttributeError``, ``NameError``, ``NotImplementedError``,
    ``ImportError``, ``AssertionError``), HTTP 401/403/404 (a ``status_code`` on the
    error or its ``response``), error classes named like ``AuthenticationError``,
    ``PermissionDeniedError`` or ``NotFoundError``, and a missing API key."""
    if isinstance(exc, RAGSystemError):
        return None  # the library's own errors say what they are
    if isinstance(exc, ImportError):
        return "install the missing package"
    if isinstance(exc, _PROGRAMMING_ERRORS):
        return "check that the object implements the interface the library calls (see the traceback)"
    status = _status_of(exc)
    name = type(exc).__name__
    if status in _SETUP_STATUSES or any(part in name for part in _SETUP_NAMES):
        if status == 404 or "NotFound" in name:
            return "check the model name and the server's base URL"
        return "check the API key or credentials"
    message = str(exc).lower()
    if any(key in message for key in _MISSING_KEY) and any(
        word in message for word in ("must be set", "missing", "not set", "not found", "no api key")
    ):
        return "set the API key (argument or environment variable)"
    return None


def misconfigured(component: str, obj: object, exc: BaseException, hint: str) -> ConfigurationError:
    """The :class:`ConfigurationError` for ``exc``, raised by ``obj`` (the LLM or backend)."""
    return ConfigurationError(
        f"the {component} {type(obj).__name__} raised {type(exc).__name__}: {exc}. This is a "
        f"programming or configuration error, not a transient fault, so the query stops: {hint}. "
        "(ExecutionConfig(misconfiguration='fallback') answers with the fallback instead.)",
        component=component,
    )
