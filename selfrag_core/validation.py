"""Validation shared by the library and the application layer: questions and query
contexts at the public boundary."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from selfrag_core.errors import ConfigurationError

#: queries longer than this are rejected (a prompt this long is a mistake, not a question)
MAX_QUERY_CHARS = 20_000
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def validate_query(query: Any, *, name: str = "query", max_chars: int = MAX_QUERY_CHARS) -> str:
    """Return the query cleaned of control characters, or raise TypeError / ValueError."""
    if not isinstance(query, str):
        raise TypeError(f"{name} must be a str, got {type(query).__name__}")
    cleaned = _CONTROL.sub(" ", query).strip()
    if not cleaned:
        raise ValueError(f"{name} is empty; pass the question as a non-empty string")
    if len(cleaned) > max_chars:
        raise ValueError(
            f"{name} is {len(cleaned):,} characters; the limit is {max_chars:,}. "
            "Send the question, not the documents (index those with add_document)."
        )
    return cleaned


def validate_context(context: Any) -> dict[str, Any]:
    if context is None:
        return {}
    if not isinstance(context, Mapping):
        raise TypeError(f"context must be a dict or None, got {type(context).__name__}")
    return dict(context)


def check_int(name: str, value: object, minimum: int | None = 0) -> int:
    """``value`` when it is an int (not a bool) of at least ``minimum`` (None: any int),
    else a :class:`~selfrag_core.errors.ConfigurationError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_bool(name: str, value: object) -> bool:
    """``value`` when it is True or False, else a ConfigurationError naming ``name``."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {value!r}")
    return value


def check_unit(name: str, value: object) -> float:
    """``value`` as a float when it is a number in [0, 1], else a ConfigurationError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{name} must be a number in [0, 1], got {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise ConfigurationError(f"{name} must be in [0, 1], got {value}")
    return float(value)


def check_positive_or_none(name: str, value: object) -> float | None:
    """``value`` when it is None or a positive number, else a ConfigurationError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number or None, got {value!r}")
    return float(value)


def check_verifier(verifier: object, name: str = "verifier") -> None:
    """Nothing when ``verifier`` is None or has ``verify(sentences, passages, question)``
    and a ``threshold`` (a :class:`~selfrag_core.verify.Verifier`), else a TypeError
    saying what to pass."""
    if verifier is None:
        return
    if not callable(getattr(verifier, "verify", None)) or not hasattr(verifier, "threshold"):
        raise TypeError(
            f"{name} must have verify(sentences, passages, question) and a threshold (a "
            "selfrag_core.verify.Verifier: LexicalVerifier, CrossEncoderVerifier or your own), "
            f"got {type(verifier).__name__}"
        )
