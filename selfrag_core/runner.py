"""How a strategy's plan is run: the public runners (``run_query``, ``arun_query``,
``stream_query``, ``astream_query``, ``retrieve_documents``, ``aretrieve_documents``) over
the engine's drivers (:mod:`selfrag_core.engine`), and what a stream carries
(:class:`StreamEvent`, :class:`Step`). ``Strategy.query``/``aquery``/``stream``/``astream``,
the CLI, the HTTP service, ``selfrag mcp``, the evaluation harness and both adapters run
every query through these; a strategy is anything with ``plan(query, context)``
(:func:`check_strategy`)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from selfrag_core.citations import cite
from selfrag_core.config import ExecutionConfig
from selfrag_core.engine import Deadline, Note, Plan, Run, run_async, run_sync
from selfrag_core.errors import QueryTimeoutError, StrategyError
from selfrag_core.grounding import is_refusal
from selfrag_core.types import (
    GENERATION_FAILED_ANSWER,
    Citation,
    Result,
    RetrievedDoc,
    TraceEvent,
    _json_safe,
    no_answer_reason,
)
from selfrag_core.validation import validate_context, validate_query

if TYPE_CHECKING:
    from selfrag_core.verify import Verifier

R = TypeVar("R")
T = TypeVar("T")


#: the kinds of :class:`Step`, in the order a query usually meets them
STEP_KINDS = ("retrieval", "hypothesis", "sub_question", "verdict", "attempt", "fallback")


@dataclass(frozen=True)
class Step:
    """One step of a query before (or around) its answer, as a stream shows it: a trace
    event (:class:`~selfrag_core.types.TraceEvent`) of one of the :data:`STEP_KINDS`
    (see :func:`step_of` for which event is which step).

    ``kind``: ``"retrieval"`` (a retrieval ended: ``detail`` has ``query``, ``top_k`` and
    ``hits``, the number of documents found), ``"hypothesis"`` (a hypothetical passage
    written: a call a strategy's ``step_calls`` names so), ``"sub_question"``
    (``question``, ``depth`` and ``status``: ``started``, ``answered`` with its ``answer``,
    or ``failed``), ``"verdict"`` (a judge's verdict:
    SelfIRAG's ``confidence`` and ``scores``, or SelfHealingRAG's ``score`` of an
    attempt against its ``threshold`` and whether it ``passed``), ``"attempt"``
    (SelfHealingRAG: ``strategy`` and ``status``: ``started``, ``failed`` or ``rejected``)
    or ``"fallback"`` (every other absorbed failure: ``name`` says which, ``error`` why).
    ``name`` is the trace event's name and ``error`` its error (a failed retrieval or
    passage has one too). ``event`` is the trace event itself.
    """

    kind: str
    name: str
    detail: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    event: TraceEvent | None = field(default=None, repr=False, compare=False)

    @property
    def text(self) -> str:
        """The step as one line for people ("retrieved 3 documents for 'Why ...'")."""
        d, why = self.detail, f": {self.error}" if self.error else ""
        if self.kind == "retrieval":
            found = "retrieval failed" if self.error else f"retrieved {d.get('hits', 0)} document(s)"
            return f"{found} for {_quoted(d.get('query'))}{why}"
        if self.kind == "hypothesis":
            return f"hypothetical passage failed{why}" if self.error else "wrote a hypothetical passage"
        if self.kind == "sub_question":
            status = d.get("status")
            head = {"started": "sub-question", "answered": "answered sub-question"}.get(str(status))
            return f"{head or 'sub-question failed'}: {_quoted(d.get('question'))}{'' if head else why}"
        if self.kind == "verdict":
            if "score" in d:
                passed = "passes" if d.get("passed") else "is below"
                score, threshold = d["score"], d.get("threshold")
                return f"verdict on {d.get('strategy')}: {score:.2f} {passed} the threshold {threshold}"
            confidence = d.get("confidence")
            return f"verdict: confidence {'unknown' if confidence is None else f'{confidence:.2f}'}"
        if self.kind == "attempt":
            status = d.get("status")
            if status == "started":
                return f"attempt {d.get('attempt')}: {d.get('strategy')}"
            who = f" ({d['strategy']})" if d.get("strategy") else ""
            return f"attempt {status}{who}{why}"
        then = d.get("then")
        return f"fallback: {self.name}{why}{f' (then {then})' if then else ''}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``kind``, ``name``, ``detail``, ``text`` and ``error`` when there is one."""
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "detail": _json_safe(dict(self.detail))}
        if self.error is not None:
            out["error"] = self.error
        out["text"] = self.text
        return out


def _quoted(text: Any, limit: int = 80) -> str:
    text = " ".join(str(text or "").split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


#: LLM calls that are steps, by purpose: each strategy class's ``step_calls``
#: (:attr:`~selfrag_core.strategies.base.Strategy.step_calls`), added as it is defined
STEP_CALLS: dict[str, str] = {}
#: notes that are steps, by name, other than fallbacks
_STEP_NOTES = {"sub_question": "sub_question", "verdict": "verdict", "below_threshold": "attempt"}


def step_of(event: TraceEvent) -> Step | None:
    """The step that ``event`` stands for, or None (LLM calls no strategy's ``step_calls``
    names, decisions and progress notes that are none of the :data:`STEP_KINDS`): every
    retrieval; every call of a purpose in :data:`STEP_CALLS` (its kind); the ``sub_question`` and
    ``verdict`` notes; SelfHealingRAG's attempt markers, ``attempt_failed`` and
    ``below_threshold`` (an attempt started, failed, rejected); every other fallback.
    The one mapping behind every stream's steps, the CLI's, the HTTP service's and the
    adapters' events."""
    detail = dict(event.detail)
    if event.kind == "retrieval":
        detail = {
            "query": detail.get("query", ""),
            "top_k": detail.get("top_k"),
            "hits": detail.get("hits", 0),
        }
        kind: str | None = "retrieval"
    elif event.kind == "llm":
        kind = STEP_CALLS.get(event.name)
        detail = {}
    elif event.kind == "attempt":
        kind, detail = "attempt", {"strategy": event.name, "status": "started", **detail}
    elif event.name == "attempt_failed":
        kind, detail = "attempt", {**detail, "status": "failed"}
    elif event.name in _STEP_NOTES:
        kind = _STEP_NOTES[event.name]
        detail = {**detail, "status": "rejected"} if kind == "attempt" else detail
    else:
        kind = "fallback" if event.kind == "fallback" else None
    return None if kind is None else Step(kind, event.name, detail, event.error, event)


@dataclass(frozen=True)
class StreamEvent(Generic[R]):
    """One item of a streamed query: ``"token"`` (a piece of the final answer's text),
    ``"reset"`` (the tokens so far are void: the answer follows in full), ``"step"``
    (something the query did on the way, in ``step``: a retrieval, a hypothetical
    passage, a sub-question, a verdict, an attempt, a fallback; see :class:`Step`) or,
    last, ``"result"`` (the complete result, authoritative).

    The tokens after the last reset make up the result's answer (give or take
    surrounding whitespace). A reset comes only when the text streamed is not the
    answer: the LLM's stream broke and its retry said something else, or every attempt
    failed and the strategy fell back to another answer. Steps come as they happen, in
    the order of the result's trace, one per trace event that is a step
    (:func:`step_of`); their ``text`` is empty, so a consumer that wants only the answer
    reads the tokens and the result and lets the other kinds pass.
    """

    kind: str
    text: str = ""
    result: R | None = None
    step: Step | None = None


def closing_events(streamed: str, result: Any) -> list[StreamEvent[Any]]:
    """What a stream sends before its result so that its tokens make up the answer:
    nothing when they already do; the answer when nothing visible was streamed (the
    strategy picks its answer at the end, or the LLM cannot stream); else a reset and
    the answer."""
    answer = getattr(result, "answer", "")
    answer = answer if isinstance(answer, str) else ""
    if streamed.strip() == answer.strip():
        return []
    events: list[StreamEvent[Any]] = [StreamEvent("reset")] if streamed.strip() else []
    return [*events, StreamEvent("token", answer)] if answer else events


def check_strategy(strategy: Any) -> Any:
    """``strategy`` when it is one (anything with ``plan(query, context)`` and
    ``query``/``aquery``/``stream``/``astream``: every ``Strategy``, built-in or yours),
    else a ``TypeError`` saying what is missing. The adapters accept strategies this way."""
    needed = ("plan", "query", "aquery", "stream", "astream")
    missing = [name for name in needed if not callable(getattr(strategy, name, None))]
    if missing:
        raise TypeError(
            f"{type(strategy).__name__} is not a selfrag strategy: it has no {', '.join(missing)}; "
            "pass SelfIRAG, RecursiveRAG, another strategy of selfrag or a Strategy subclass of yours"
        )
    return strategy


def finish_trace(
    result: T,
    run: Run,
    *,
    verifier: Verifier | None = None,
    citing: Callable[..., list[Citation]] = cite,
) -> T:
    """The result (a :class:`~selfrag_core.types.Result`) gets the run's trace and wall
    time, why it holds no answer (``no_answer``, :func:`~selfrag_core.types.no_answer_reason`,
    unless its plan said), and the citations of its answer (``citing``: the strategy's
    :func:`~selfrag_core.citations.cite`, with ``verifier``, None for the default, unless
    its plan computed them on the way; none for a refusal or a fallback). Past the query's
    deadline they are not computed: a ``citations_skipped`` note holds the
    QueryTimeoutError. Another object is returned as it is. ``Strategy.finish`` runs it;
    so does a run of a strategy without ``finish``."""
    if isinstance(result, Result):
        result.trace = run.trace
        if result.no_answer is None:
            result.no_answer = no_answer_reason(result.answer, result.documents, run.trace)
        answer = result.answer
        usable = answer.strip() != GENERATION_FAILED_ANSWER and not is_refusal(answer)
        if not usable:
            result.citations = []
        elif not result.citations:
            try:
                Deadline("the citations").check(run)
                result.citations = citing(answer, result.documents, verifier=verifier, question=run.query)
            except QueryTimeoutError as e:
                run.record_note(
                    Note("citations_skipped", f"{type(e).__name__}: {e}", {"then": "no citations"})
                )
    run.trace.wall_s = run.trace.elapsed()
    return result


def _finish_of(strategy: Any) -> Callable[[Any, Run], Any]:
    """How a run of ``strategy`` is finished: its ``finish`` (every ``Strategy``'s), else
    :func:`finish_trace`."""
    finish: Callable[[Any, Run], Any] = getattr(strategy, "finish", None) or finish_trace
    return finish


@contextlib.contextmanager
def _reports_finished(strategy: Any, run: Run) -> Iterator[None]:
    """A StrategyError leaving the block carries its report finished (trace, usage)."""
    try:
        yield
    except StrategyError as e:
        if e.report is not None:
            _finish_of(strategy)(e.report, run)
        raise


def _as_called(strategy: Any, query: str, context: Mapping[str, Any] | None) -> Any:
    """``strategy`` as a call with ``context`` runs it (``for_call``: the context's per-call
    settings in its config), so that what finishes the result (its citations, checked by
    the config's verifier) sees them too. The query and the context are checked first, as
    ``plan`` checks them, so a bad one raises the same error."""
    for_call = getattr(strategy, "for_call", None)
    if not context or for_call is None:
        return strategy
    validate_query(query)
    return for_call(validate_context(context))


def run_query(
    strategy: Any, query: str, context: Mapping[str, Any] | None = None, *, run: Run | None = None
) -> Any:
    """Answer ``query`` with ``strategy`` (anything with ``plan(query, context)``) with
    blocking calls: safe inside a running event loop. ``run``: the per-query state
    (:class:`~selfrag_core.engine.Run`); default ``Run(strategy.execution)``. Returns the
    finished result (its trace and wall time set); a StrategyError keeps its finished
    report. ``Strategy.query``, the CLI, the HTTP service and both adapters run this."""
    strategy = _as_called(strategy, query, context)
    plan = strategy.plan(query, context)
    run = run if run is not None else Run(_execution_of(strategy))
    run.query = run.query or query
    with _reports_finished(strategy, run):
        result = run_sync(plan, run)
    return _finish_of(strategy)(result, run)


async def arun_query(
    strategy: Any, query: str, context: Mapping[str, Any] | None = None, *, run: Run | None = None
) -> Any:
    """Async :func:`run_query`, on the running event loop (no thread when the LLM and the
    backend are async)."""
    strategy = _as_called(strategy, query, context)
    plan = strategy.plan(query, context)
    run = run if run is not None else Run(_execution_of(strategy))
    run.query = run.query or query
    with _reports_finished(strategy, run):
        result = await run_async(plan, run)
    return _finish_of(strategy)(result, run)


def _documents_plan(strategy: Any, query: str, context: Mapping[str, Any] | None, top_k: int | None) -> Any:
    """``strategy``'s own ranking plan for ``query`` when it has one (``documents_plan``, as a
    strategy ranking on its own defines it), else None: the one place the retrievers' choice is made."""
    own = getattr(strategy, "documents_plan", None)
    return own(query, context, top_k) if callable(own) else None


def _at_most(docs: Any, top_k: int | None) -> list[RetrievedDoc]:
    return list(docs or ())[:top_k] if top_k is not None else list(docs or ())


def retrieve_documents(
    strategy: Any, query: str, top_k: int | None = None, context: Mapping[str, Any] | None = None
) -> list[RetrievedDoc]:
    """The documents ``strategy`` finds for ``query``, at most ``top_k``: what a retriever
    returns (both adapters' retrievers call this). A strategy with its own ranking
    (``documents_plan(query, context, top_k)``: a fused ranking, say, in one LLM round,
    no answer) runs only that; any other runs its query and returns the answer's sources."""
    plan = _documents_plan(strategy, query, context, top_k)
    if plan is None:
        return _at_most(run_query(strategy, query, context).sources, top_k)
    return _at_most(run_sync(plan, Run(_execution_of(strategy))), top_k)


async def aretrieve_documents(
    strategy: Any, query: str, top_k: int | None = None, context: Mapping[str, Any] | None = None
) -> list[RetrievedDoc]:
    """Async :func:`retrieve_documents`."""
    plan = _documents_plan(strategy, query, context, top_k)
    if plan is None:
        return _at_most((await arun_query(strategy, query, context)).sources, top_k)
    return _at_most(await run_async(plan, Run(_execution_of(strategy))), top_k)


def _execution_of(strategy: Any) -> ExecutionConfig:
    execution = getattr(strategy, "execution", None)
    return execution if isinstance(execution, ExecutionConfig) else ExecutionConfig()


def stream_query(
    strategy: Any, query: str, context: Mapping[str, Any] | None = None
) -> Iterator[StreamEvent[Any]]:
    """Answer ``query`` with ``strategy`` on a worker thread, yielding its steps and the
    final answer's tokens as they happen, then the result (see :class:`StreamEvent` and
    :func:`closing_events`). Bad input raises here, before anything runs."""
    strategy = _as_called(strategy, query, context)
    return _stream(strategy, strategy.plan(query, context), query)


def _streamed_run(strategy: Any, put: Callable[[StreamEvent[Any]], None], query: str) -> Run:
    """The run of a streamed query: its tokens and steps go to ``put`` in the order they
    happen (a listener of :func:`~selfrag_core.engine.observe_trace` still hears every
    trace event)."""
    run = Run(_execution_of(strategy), on_token=lambda text: put(StreamEvent("token", text)))
    run.query = query
    outer = run.trace.listener

    def listener(event: TraceEvent) -> None:
        if outer is not None:
            outer(event)
        step = step_of(event)
        if step is not None:
            put(StreamEvent("step", step=step))

    run.trace.listener = listener
    return run


def _stream(strategy: Any, plan: Plan[Any], query: str) -> Iterator[StreamEvent[Any]]:
    events: queue.Queue[StreamEvent[Any] | BaseException] = queue.Queue()
    run = _streamed_run(strategy, events.put, query)

    def work() -> None:
        try:
            with _reports_finished(strategy, run):
                result = run_sync(plan, run)
            events.put(StreamEvent("result", result=_finish_of(strategy)(result, run)))
        except BaseException as e:  # re-raised in the consumer's thread
            events.put(e)

    threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True).start()
    streamed: list[str] = []
    while True:
        event = events.get()
        if isinstance(event, BaseException):
            raise event
        if event.kind == "result":
            yield from closing_events("".join(streamed), event.result)
            yield event
            return
        if event.kind == "token":
            streamed.append(event.text)
        yield event


def astream_query(
    strategy: Any, query: str, context: Mapping[str, Any] | None = None
) -> AsyncIterator[StreamEvent[Any]]:
    """Async :func:`stream_query`, on the running event loop."""
    strategy = _as_called(strategy, query, context)
    return _astream(strategy, strategy.plan(query, context), query)


async def _astream(strategy: Any, plan: Plan[Any], query: str) -> AsyncIterator[StreamEvent[Any]]:
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[StreamEvent[Any]] = asyncio.Queue()
    on_loop = threading.get_ident()

    def put(event: StreamEvent[Any]) -> None:  # on the loop, or from a worker thread for sync calls
        if threading.get_ident() == on_loop:
            events.put_nowait(event)
        else:
            loop.call_soon_threadsafe(events.put_nowait, event)

    run = _streamed_run(strategy, put, query)
    task = asyncio.ensure_future(run_async(plan, run))
    streamed: list[str] = []

    def sent(event: StreamEvent[Any]) -> StreamEvent[Any]:
        if event.kind == "token":
            streamed.append(event.text)
        return event

    try:
        while not task.done():
            getter = asyncio.ensure_future(events.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield sent(getter.result())
            else:
                getter.cancel()
        with _reports_finished(strategy, run):
            outcome = task.result()
        result = _finish_of(strategy)(outcome, run)  # its notes are steps too
        while not events.empty():
            yield sent(events.get_nowait())
        for event in closing_events("".join(streamed), result):
            yield event
        yield StreamEvent("result", result=result)
    finally:
        if not task.done():  # the consumer went away: stop the query
            task.cancel()
