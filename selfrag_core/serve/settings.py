"""The service's limits and options: one frozen dataclass, validated at construction."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from selfrag_core.errors import ConfigurationError
from selfrag_core.validation import check_int, check_positive_or_none

#: the environment variable holding the optional bearer token
TOKEN_ENV = "SELFRAG_API_TOKEN"
#: the environment variable turning on /metrics (``1``/``true``/``yes``/``on``, or ``0``/...)
METRICS_ENV = "SELFRAG_METRICS"
#: the environment variable turning on OpenTelemetry spans (the same values)
OTEL_ENV = "SELFRAG_OTEL"
_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"", "0", "false", "no", "off"})


@dataclass(frozen=True)
class ServeSettings:
    """Limits a public service needs, and where the index persists.

    max_body_bytes: larger request bodies get 413.
    max_question_chars: longer questions get 400.
    max_concurrent_queries: queries running at once; beyond it 503 with Retry-After.
    admission_control: admit only as many queries as can be expected to finish within
        their timeout, from the measured service time (busy seconds per finished query):
        the rest get 503 at once, with a Retry-After of the expected wait, instead of
        waiting behind the others into a 504 (``serve.admission``). A query cut off by
        its timeout is not a finished one (the service time grows with the overload).
        Until a query has finished, only the queries that can run at once
        (``query_concurrency``) are admitted. False: always up to ``max_concurrent_queries``.
    query_concurrency: queries that run at once; the other admitted queries wait their
        turn, first come first served, their wait counted against their timeout. None
        (the default): what the LLM declares (its ``concurrency``: the local model answers
        one call at a time, 1), else up to ``max_concurrent_queries``.
    retry_after_s: the Retry-After value sent with 503 (at least this when measured).
    max_llm_calls / query_timeout: per-request caps (a request may only lower them);
        a query that hits either gets 504 with its partial trace.
    timeout_grace: seconds past ``query_timeout`` after which a query is cancelled outright.
    max_top_k: the largest ``top_k`` a request may ask for.
    max_batch_documents / max_document_chars: ingestion limits (400 beyond them).
    api_token: when set, every endpoint but /healthz and /readyz needs ``Authorization:
        Bearer <token>``; printable ASCII without spaces (RFC 6750).
    cors_origins: allowed CORS origins; empty (the default) means no CORS headers.
    index_dir: where the index is saved after every change when the backend has ``save``;
        None with an external backend, which is written to directly.
    readiness_timeout: seconds the /readyz probes may take before the check fails.
    metrics: serve Prometheus metrics at /metrics (``pip install 'selfrag[metrics]'``).
    shutdown_grace_s: on shutdown, seconds the queries in flight get to finish.
    otel: record every query as OpenTelemetry spans (``pip install 'selfrag[otel]'``), to
        the global tracer provider or else the one ``OTEL_EXPORTER_OTLP_*`` configures.
    """

    max_body_bytes: int = 1_000_000
    max_question_chars: int = 4_000
    max_concurrent_queries: int = 256
    admission_control: bool = True
    query_concurrency: int | None = None
    retry_after_s: int = 1
    max_llm_calls: int | None = 32
    query_timeout: float | None = 60.0
    timeout_grace: float = 2.0
    max_top_k: int = 50
    max_batch_documents: int = 256
    max_document_chars: int = 500_000
    api_token: str | None = field(default=None, repr=False)
    cors_origins: tuple[str, ...] = ()
    index_dir: str | None = None
    readiness_timeout: float = 2.0
    metrics: bool = False
    shutdown_grace_s: float = 30.0
    otel: bool = False

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_question_chars", "max_concurrent_queries", "max_top_k"):
            check_int(name, getattr(self, name), 1)
        for name in ("max_batch_documents", "max_document_chars"):
            check_int(name, getattr(self, name), 1)
        check_int("retry_after_s", self.retry_after_s, 0)
        if self.query_concurrency is not None:
            check_int("query_concurrency", self.query_concurrency, 1)
        if self.max_llm_calls is not None:
            check_int("max_llm_calls", self.max_llm_calls, 1)
        check_positive_or_none("query_timeout", self.query_timeout)
        if self.timeout_grace < 0:
            raise ConfigurationError("timeout_grace must be >= 0")
        if not self.readiness_timeout > 0:
            raise ConfigurationError(f"readiness_timeout must be > 0 seconds, got {self.readiness_timeout!r}")
        if not self.shutdown_grace_s >= 0:
            raise ConfigurationError(f"shutdown_grace_s must be >= 0 seconds, got {self.shutdown_grace_s!r}")
        for flag in ("metrics", "otel", "admission_control"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.api_token is not None:
            _check_token(self.api_token)
        if isinstance(self.cors_origins, str):
            raise ConfigurationError("cors_origins must be a list of origins, not a string")
        object.__setattr__(self, "cors_origins", tuple(self.cors_origins))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> ServeSettings:
        """Settings with ``api_token`` read from ``SELFRAG_API_TOKEN``, ``metrics`` from
        ``SELFRAG_METRICS`` and ``otel`` from ``SELFRAG_OTEL`` (unless overridden). A token
        variable set but empty is a ConfigurationError, not an open service."""
        env = os.environ if environ is None else environ
        raw = env.get(TOKEN_ENV)
        token = None if raw is None else raw.strip()
        if token == "" and "api_token" not in overrides:
            raise ConfigurationError(
                f"{TOKEN_ENV} is set but empty; unset it to serve without a token, or give it a value"
            )
        read: dict[str, object] = {"api_token": token}
        for name, variable in (("metrics", METRICS_ENV), ("otel", OTEL_ENV)):
            flag = env.get(variable)
            if flag is not None and name not in overrides:
                read[name] = _flag(variable, flag)
        return cls(**{**read, **overrides})  # type: ignore[arg-type]


def _flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    raise ConfigurationError(f"{name}={raw!r} is not a yes/no value; use 1 or 0 (true/false, on/off)")


def _check_token(token: object) -> None:
    """Refuse a token no client can be sure to send as it is: clients encode non-ASCII
    differently (curl as UTF-8, fetch as latin-1, httpx not at all), so only printable
    ASCII is accepted (RFC 6750). The message gives the position, never the token."""
    if not isinstance(token, str):
        raise ConfigurationError(f"api_token must be a str, got {type(token).__name__}")
    if not token.strip():
        raise ConfigurationError(f"api_token is empty; unset {TOKEN_ENV} or give it a value")
    for i, char in enumerate(token):
        if not "!" <= char <= "~":
            kind = "a non-ASCII character" if char > "\x7f" else "a space or control character"
            raise ConfigurationError(
                f"api_token ({TOKEN_ENV}) has {kind} at position {i}: use printable ASCII without "
                "spaces, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address to bind or a client's address) is this machine only."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost"
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return bool((mapped or address).is_loopback)
