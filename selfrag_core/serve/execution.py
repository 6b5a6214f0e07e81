"""Running one query for the service: the request's options are per-call settings in the
query's context (``{"top_k": 3}``, as any caller passes them; the shared strategy is never
mutated), and the query gets its own ``ExecutionConfig``, so the LLM-call budget and the
timeout hold per request and the partial trace survives a cancelled query. A listener
sees every trace event (and each step among them), then the final answer's text.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from selfrag_core.config import ExecutionConfig, StrategyConfig
from selfrag_core.engine import Run
from selfrag_core.errors import ConfigurationError, StrategyError
from selfrag_core.llm import within
from selfrag_core.runner import _execution_of, arun_query, closing_events, step_of
from selfrag_core.serve.models import QueryOptions, QueryRequest, StrategyOptions
from selfrag_core.serve.settings import ServeSettings
from selfrag_core.strategies.base import Strategy
from selfrag_core.types import Trace, TraceEvent


class UnsupportedOptionError(ConfigurationError):
    """A request option that the chosen strategy does not have."""


def request_settings(request: QueryOptions) -> dict[str, Any]:
    """The settings the request overrides (its :class:`StrategyOptions` given), by the
    configs' names."""
    return request.model_dump(include=set(StrategyOptions.model_fields), exclude_none=True)


def check_settings(strategy: Strategy[Any], settings: Mapping[str, Any]) -> None:
    """Raise UnsupportedOptionError for a setting ``strategy``'s config does not have, and
    ConfigurationError for a bad value, before the query runs."""
    config = strategy.config
    names = config.names() if isinstance(config, StrategyConfig) else frozenset()
    for setting in settings:
        if setting not in names:
            raise UnsupportedOptionError(f"option {setting!r} does not apply to {type(strategy).__name__}")
    if isinstance(config, StrategyConfig):
        config.with_overrides(settings)


def _min(*values: float | None) -> Any:
    return min((v for v in values if v is not None), default=None)


@dataclass
class Outcome:
    """What a query produced: the result (None when it was cut off), its trace, and
    whether it exceeded its budget or timeout (``"budget_exceeded"`` / ``"query_timeout"``)."""

    result: Any
    trace: Trace
    exceeded: str | None = None

    def message(self, execution: ExecutionConfig) -> str:
        if self.exceeded == "budget_exceeded":
            return (
                f"the query used up its budget of {execution.max_llm_calls} LLM calls; "
                "ask a simpler question or raise max_llm_calls"
            )
        knob = execution.knobs.get("query_timeout", "ExecutionConfig.query_timeout")
        return f"the query ran past its {execution.query_timeout}s timeout; retry later or raise {knob}"


def _exceeded(trace: Trace, run: Run) -> str | None:
    errors = [e.error for e in trace.events if e.error]
    if any(e.startswith("BudgetExceededError") for e in errors):
        return "budget_exceeded"
    left = run.remaining()
    if any(e.startswith("QueryTimeoutError") for e in errors) or (left is not None and left <= 0):
        return "query_timeout"
    return None


def prepare(
    strategy: Strategy[Any], request: QueryRequest, settings: ServeSettings
) -> tuple[Strategy[Any], ExecutionConfig]:
    """The strategy the request runs (the shared one, or a shallow copy without its
    conversation memory) and its execution config: the strategy's, under the server's caps,
    lowered by the request. Raises on a bad option (:func:`check_settings`)."""
    check_settings(strategy, request_settings(request))
    clone = strategy
    if strategy.memory is not None:
        # a stateless service: one client's conversation must never reach another's prompt
        clone = copy.copy(strategy)
        clone.memory = None
    base = _execution_of(strategy)  # what the engine would run it with
    timeout = _min(base.query_timeout, settings.query_timeout, request.timeout)
    return clone, dataclasses.replace(
        base,
        max_llm_calls=_min(base.max_llm_calls, settings.max_llm_calls, request.max_llm_calls),
        query_timeout=timeout,
        knobs={**base.knobs, **_knobs(timeout, request, settings)},
    )


def _knobs(timeout: float | None, request: QueryRequest, settings: ServeSettings) -> dict[str, str]:
    """How the limit that binds a request is raised: the request's own ``timeout`` (up to
    the server's), or the server's ``--timeout``; else the strategy's own setting."""
    limit = settings.query_timeout
    if timeout is not None and timeout == request.timeout and timeout != limit:
        return {"query_timeout": "the request's timeout" + (f" (up to {limit:g}s)" if limit else "")}
    if timeout is not None and timeout == limit:
        return {"query_timeout": "the server's --timeout (ServeSettings.query_timeout)"}
    return {}


def _tell(listener: Callable[[str, dict[str, Any]], None], event: TraceEvent) -> None:
    """A trace event as the stream's ``trace`` event, then, when it is a step (:func:`step_of`:
    a retrieval, a hypothetical passage, a sub-question, a verdict, an attempt, a
    fallback), as a ``step`` event (``Step.to_dict``)."""
    listener("trace", event.to_dict())
    step = step_of(event)
    if step is not None:
        listener("step", step.to_dict())


async def execute(
    strategy: Strategy[Any],
    question: str,
    request: QueryRequest,
    execution: ExecutionConfig,
    settings: ServeSettings,
    listener: Callable[[str, dict[str, Any]], None] | None = None,
    *,
    on_trace: Callable[[Trace], None] | None = None,
    context: Mapping[str, Any] | None = None,
) -> Outcome:
    """Run ``question`` through the prepared ``strategy`` on the running loop; ``listener``
    gets (event name, JSON-safe data). ``on_trace`` is given the query's trace as it starts
    (it outlives a query that raises). A StrategyError (SelfHealingRAG: every attempt
    raised) is re-raised, unless the budget or the timeout caused it. ``context``: more
    entries of the strategy's context (``memory``: a conversation); the request's settings
    (:func:`request_settings`) join it."""
    options = {**(context or {}), **request_settings(request)}
    if request.metadata_filter:
        options["metadata_filter"] = dict(request.metadata_filter)
    streamed: list[str] = []

    def on_token(text: str) -> None:  # the final answer's text, where the strategy streams it
        streamed.append(text)
        if listener is not None:
            listener("token", {"text": text})

    run = Run(execution, on_token=on_token if listener is not None else None)
    if listener is not None:
        run.trace.listener = lambda event: _tell(listener, event)
    trace = run.trace
    if on_trace is not None:
        on_trace(trace)
    hard_limit = None if execution.query_timeout is None else execution.query_timeout + settings.timeout_grace
    try:
        result = await within(arun_query(strategy, question, options or None, run=run), hard_limit)
    except asyncio.TimeoutError:
        trace.wall_s = trace.elapsed()
        return Outcome(None, trace, "query_timeout")
    except StrategyError as e:  # its report is finished
        exceeded = _exceeded(trace, run)
        if e.report is None or exceeded is None:
            raise
        return Outcome(e.report, trace, exceeded)
    if listener is not None:  # the answer when it was chosen at the end, or a reset and the answer
        for event in closing_events("".join(streamed), result):
            listener(event.kind, {"text": event.text} if event.kind == "token" else {})
    return Outcome(result, trace, _exceeded(trace, run))
