"""Readiness (``GET /readyz``): whether this replica's dependencies answer now. Two
checks, run together under ``ServeSettings.readiness_timeout``:

* ``backend``: a ``top_k=1`` retrieval through the library's own retrieval path
  (``_aretrieve_safe``); an empty result is still "ok".
* ``llm``: the LLM's ``aping()`` (or ``ping()``, in a thread) where it has one
  (``LLMClient.aping``), else "unchecked": no probe ever spends a generation.

A probe's result is kept for ``ttl`` seconds, and concurrent requests share one probe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from selfrag_core.llm import resolve_llm, within
from selfrag_core.retrieval import _aretrieve_safe

_MAX_ERROR = 300  # characters of a check's error message


@dataclass(frozen=True)
class Readiness:
    """One probe's outcome: ``checks`` maps each check to "ok", "unchecked" or "failed";
    ``errors`` maps each failed one to what went wrong and what to do."""

    checks: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"status": "ready" if self.ready else "not_ready", "checks": self.checks}
        if self.errors:
            body["errors"] = self.errors
        return body


class ReadinessProbe:
    """Probes ``backend`` and ``llm``, keeping each outcome for ``ttl`` seconds."""

    def __init__(
        self,
        backend: Any,
        llm: Any,
        *,
        timeout: float,
        ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend, self.llm = backend, llm
        self.timeout, self.ttl, self.clock = timeout, ttl, clock
        self._cached: tuple[float, Readiness] | None = None
        self._lock = asyncio.Lock()

    async def check(self) -> Readiness:
        """The latest outcome if younger than ``ttl``, else a new probe's."""
        if (fresh := self._fresh()) is None:
            async with self._lock:  # concurrent requests wait for one probe
                if (fresh := self._fresh()) is None:
                    fresh = await self._probe()
                    self._cached = (self.clock(), fresh)
        return fresh

    def _fresh(self) -> Readiness | None:
        if self._cached is None or self.clock() - self._cached[0] >= self.ttl:
            return None
        return self._cached[1]

    async def _probe(self) -> Readiness:
        backend, llm = await asyncio.gather(self._check_backend(), self._check_llm())
        results = {"backend": backend, "llm": llm}
        errors = {name: error for name, (_, error) in results.items() if error is not None}
        return Readiness({name: status for name, (status, _) in results.items()}, errors)

    async def _check_backend(self) -> tuple[str, str | None]:
        if self.backend is None:  # an app whose strategies hold their own backends
            return "unchecked", None
        probe = _aretrieve_safe(self.backend, "readiness probe", top_k=1)
        return (await self._run(probe, "the backend did not answer a top_k=1 retrieval", "it is"))[:2]

    async def _check_llm(self) -> tuple[str, str | None]:
        client = resolve_llm(self.llm)
        if not client.pings:
            return "unchecked", None
        status, error, answer = await self._run(
            client.aping(), "the LLM did not answer its ping", "its server is"
        )
        if status == "ok" and answer is False:
            return "failed", f"{type(self.llm).__name__}.ping() answered False"
        return status, error

    async def _run(self, probe: Awaitable[Any], late: str, subject: str) -> tuple[str, str | None, Any]:
        """One probe under the timeout: ("ok", None, its answer) or ("failed", why, None)."""
        try:
            return "ok", None, await within(probe, self.timeout)
        except asyncio.TimeoutError:
            why = f"{late} within {self.timeout}s (readiness_timeout); check that {subject} up and reachable"
            return "failed", why, None
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
            return "failed", why if len(why) <= _MAX_ERROR else why[: _MAX_ERROR - 3] + "...", None
