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
    """A configuration value is invalid (also a ``ValueError``)."""


class MissingDependencyError(RAGSystemError, ImportError):
    """An optional dependency is not installed; the message names the extra."""
