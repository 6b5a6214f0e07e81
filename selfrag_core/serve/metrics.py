"""Prometheus metrics (``GET /metrics``), off unless ``ServeSettings.metrics`` is on.

Uses ``prometheus-client`` (``pip install 'selfrag[metrics]'``), a registry per app. Every
query is counted once, when it finishes, from its trace (:meth:`ServiceMetrics.query`):

=============================================  ==============================================
``selfrag_requests_total{strategy,status}``    query requests by HTTP status (499: client gone)
``selfrag_request_seconds{strategy}``          histogram of the time to answer a query
``selfrag_llm_calls_total{strategy}``          LLM calls, retries included
``selfrag_llm_tokens_total{strategy,kind}``    tokens the model reported (``input``/``output``)
``selfrag_fallbacks_total{strategy,name}``     failures absorbed by a fallback, by its name
``selfrag_errors_total{strategy,type}``        failed queries, by error type
``selfrag_documents_total{op}``                documents added / deleted (``add``/``delete``)
=============================================  ==============================================

With several workers each counts on its own, and a scrape sees one of them, unless
``PROMETHEUS_MULTIPROC_DIR`` names an empty directory (the same for every worker, emptied
between runs) before start: /metrics then answers for all of them (multiprocess mode).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from selfrag_core.errors import MissingDependencyError
from selfrag_core.types import Trace

INSTALL_HINT = "pip install 'selfrag[metrics]'"
#: prometheus-client's multiprocess directory variable
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class ServiceMetrics:
    """The service's metrics, in a registry of their own."""

    def __init__(self) -> None:
        try:
            import prometheus_client as prom  # type: ignore[import-not-found,unused-ignore]
        except ImportError as e:
            raise MissingDependencyError(
                f"metrics are on but prometheus-client is not installed ({e}): {INSTALL_HINT}, "
                "or turn metrics off (SELFRAG_METRICS=0)"
            ) from e
        self._prom = prom
        self.registry = prom.CollectorRegistry()
        counter = functools.partial(prom.Counter, registry=self.registry)
        self.requests = counter("selfrag_requests", "Query requests by HTTP status", ["strategy", "status"])
        self.seconds = prom.Histogram(
            "selfrag_request_seconds", "Seconds to answer a query", ["strategy"], registry=self.registry
        )
        self.llm_calls = counter("selfrag_llm_calls", "LLM calls (retries included)", ["strategy"])
        self.tokens = counter("selfrag_llm_tokens", "Tokens the LLM reported", ["strategy", "kind"])
        self.fallbacks = counter("selfrag_fallbacks", "Failures absorbed by a fallback", ["strategy", "name"])
        self.errors = counter("selfrag_errors", "Failed queries by error type", ["strategy", "type"])
        self.documents = counter("selfrag_documents", "Documents added or deleted", ["op"])

    def query(
        self,
        strategy: str,
        status: int,
        seconds: float | None = None,
        trace: Trace | None = None,
        error: str | None = None,
    ) -> None:
        """Count one finished (or refused) query: its status, time, LLM work and error."""
        self.requests.labels(strategy, str(status)).inc()
        if seconds is not None:
            self.seconds.labels(strategy).observe(seconds)
        if error is not None:
            self.errors.labels(strategy, error).inc()
        if trace is None:
            return
        self.llm_calls.labels(strategy).inc(trace.llm_calls)
        self.tokens.labels(strategy, "input").inc(trace.input_tokens)
        self.tokens.labels(strategy, "output").inc(trace.output_tokens)
        for event in trace.fallbacks:
            self.fallbacks.labels(strategy, event.name).inc()

    def documents_changed(self, op: str, count: int = 1) -> None:
        self.documents.labels(op).inc(count)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type (every worker's in multiprocess mode)."""
        prom, registry = self._prom, self.registry
        if os.environ.get(MULTIPROC_ENV):
            multiprocess: Any = importlib.import_module("prometheus_client.multiprocess")
            registry = prom.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        return prom.generate_latest(registry), str(prom.CONTENT_TYPE_LATEST)
