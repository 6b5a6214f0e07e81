"""The execution engine shared by every strategy, sync and async.

A strategy is written once, as a *plan*: a generator that yields effect requests
and receives their results::

    docs = yield Retrieve(backend, query, top_k)
    reply = yield Generate(llm, prompt, purpose="answer")
    a, b = yield Parallel((plan_a, plan_b))     # run together, results in order
    found = yield RetrieveMany(backend, (q1, q2), top_k)   # one call where the backend batches

A failed effect is thrown back into the plan at the ``yield`` (as ``LLMCallError``,
``RetrievalError``, ``BudgetExceededError`` or ``QueryTimeoutError``), so the plan
decides the fallback with an ordinary ``try``/``except``. ``Parallel`` and
``RetrieveMany`` never raise: a task (a query) that failed gives its exception as its
result. ``Note`` records an absorbed failure in the trace and the log.

Two small drivers carry plans out: :func:`run_sync` with threads (never touching an
event loop, so it works inside Jupyter's running loop) and :func:`run_async` with
``asyncio`` (truly async: no thread per query when the LLM and backend are async).
Both gate every LLM call and retrieval with one semaphore of
``ExecutionConfig.max_concurrency`` per query, count LLM calls against
``max_llm_calls``, and apply ``llm_timeout`` / ``retrieval_timeout`` /
``query_timeout`` (to each attempt, retrieval, wait for the semaphore and retry
back-off). A component's own timeout starts when its call does: waiting for a thread or
a local model's lock counts against ``query_timeout`` only (``workers.Limit``), and a
timeout's message names the limit that fired and the knob the user sets it by
(``ExecutionConfig.knobs``). Composed strategies (``yield from child._plan(...)``) share
all of it.

A :class:`~selfrag_core.errors.ConfigurationError` from the LLM or the backend (a
programming or configuration error: see ``ExecutionConfig.misconfiguration``) is not
thrown into the plan: the plan is closed and the error raised to the caller, from a
parallel task too, since no fallback can mend it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

from selfrag_core.config import ExecutionConfig
from selfrag_core.errors import (
    BudgetExceededError,
    ConfigurationError,
    LLMTimeoutError,
    QueryTimeoutError,
    RetrievalError,
    RetrievalTimeoutError,
)
from selfrag_core.llm import LLMReply, TokenSink, acall_llm_detailed, call_llm_detailed, llm_identity, within
from selfrag_core.retrieval import data_source_id, ignored_options, resolve_backend, supports_many
from selfrag_core.types import RetrievedDoc, Trace, TraceEvent
from selfrag_core.workers import TASKS, Limit, awaited_within, call_within

logger = logging.getLogger("selfrag")

T = TypeVar("T")


@dataclass(frozen=True)
class Generate:
    """Ask ``llm`` for a completion of ``prompt``; the result is an ``LLMReply``."""

    llm: Any
    prompt: str
    purpose: str = "generate"
    retries: int = 2
    schema: Mapping[str, Any] | None = None
    #: the final answer: sent token by token to the run's ``on_token`` when there is one
    stream: bool = False

    def quiet(self) -> Generate:
        """The same call with its streaming off."""
        return Generate(self.llm, self.prompt, self.purpose, self.retries, self.schema, stream=False)


@dataclass(frozen=True)
class Retrieve:
    """Retrieve from ``backend``; the result is a ``list[RetrievedDoc]``."""

    backend: Any
    query: str
    top_k: int = 5
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RetrieveMany:
    """Retrieve for each of ``queries`` from one ``backend``; the result is a list in query
    order, where a failed query's entry is its exception (as with :class:`Parallel`).
    One call where the backend answers several queries at once (``retrieve_many``, as
    the embedded store does: one embedder batch, one matrix product), else the same as
    :meth:`each`, the queries' ``Retrieve`` run together. The trace is the same either way."""

    backend: Any
    queries: tuple[str, ...]
    top_k: int = 5
    options: Mapping[str, Any] = field(default_factory=dict)

    def each(self) -> Parallel:
        return Parallel(tuple(Retrieve(self.backend, q, self.top_k, self.options) for q in self.queries))

    def batched(self) -> bool:
        return len(self.queries) > 1 and supports_many(self.backend)


@dataclass(frozen=True)
class Note:
    """Record an absorbed failure or a decision in the trace (result: None)."""

    name: str
    error: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "fallback"


@dataclass(frozen=True)
class Parallel:
    """Run independent tasks (effects or plans) together; the result is a list in
    task order, where a failed task's entry is its exception."""

    tasks: tuple[Any, ...]


@dataclass(frozen=True)
class Deadline:
    """Check the query's deadline (result: None): once it has passed, ``QueryTimeoutError``
    is raised at the ``yield``, as for a call. A plan yields it before work of its own
    that is linear in a reply (grounding an answer, its citations), so that nothing
    runs past ``query_timeout``."""

    #: what the plan is about to do, for the error message ("grounding the answer")
    before: str = ""

    def check(self, run: Run) -> None:
        left = run.remaining()
        if left is not None and left <= 0:
            raise run.timed_out(f" before {self.before}" if self.before else "")


Effect = Union[Generate, Retrieve, RetrieveMany, Note, Parallel, Deadline]
Call = Union[Generate, Retrieve, RetrieveMany]  # what takes a place under max_concurrency
Plan = Generator[Effect, Any, T]


#: who is told about the trace events of the queries started in this context
_TRACE_LISTENER: contextvars.ContextVar[Callable[[TraceEvent], None] | None] = contextvars.ContextVar(
    "selfrag_trace_listener", default=None
)


@contextlib.contextmanager
def observe_trace(listener: Callable[[TraceEvent], None]) -> Iterator[None]:
    """Tell ``listener`` about every trace event (LLM calls, retrievals, notes such as
    RecursiveRAG's ``sub_question`` progress) of the queries started inside the block,
    as each happens. Sync queries call it from their worker threads."""
    token = _TRACE_LISTENER.set(listener)
    try:
        yield
    finally:
        _TRACE_LISTENER.reset(token)


class RetrievalWatch:
    """A trace listener (:func:`observe_trace`) keeping the retrievals of the queries
    started while it listens, so that a retriever (the adapters' ``StrategyRetriever``)
    can tell an outage from "nothing matched": :meth:`failure` raises when every
    retrieval failed."""

    def __init__(self) -> None:
        self.retrievals: list[TraceEvent] = []

    def __call__(self, event: TraceEvent) -> None:
        if event.kind == "retrieval":
            self.retrievals.append(event)  # list.append: safe from the engine's threads

    def failure(self, strategy: Any, query: str) -> str | None:
        """None when no retrieval failed; what failed when some did ("1 of 3 retrievals
        failed (the first: ...)"); raises :class:`RetrievalError` naming the failures when all did."""
        failed = [e for e in self.retrievals if e.error]
        if not failed:
            return None
        first = f"{failed[0].name}: {failed[0].error}"
        summary = f"{len(failed)} of {len(self.retrievals)} retrievals failed (the first: {first[:300]})"
        if len(failed) < len(self.retrievals):
            return summary
        raise RetrievalError(
            f"{type(strategy).__name__} found nothing for {query[:80]!r} because {summary}; "
            "check that the backend is reachable and returns documents (strings, dicts with "
            "'text', (text, score) pairs); the strategy's trace has each failure",
            query=query,
        )


class Run:
    """Per-query state: trace, LLM-call budget, deadline. Never stored on a strategy."""

    def __init__(self, config: ExecutionConfig, on_token: TokenSink | None = None) -> None:
        self.config = config
        self.on_token = on_token
        #: the question the run answers ("" when unknown): the checks hold an answer to it
        self.query = ""
        self.trace = Trace(listener=_TRACE_LISTENER.get())
        self._calls = 0
        self._lock = threading.Lock()
        self._ignored: set[tuple[type, tuple[str, ...]]] = set()
        self._deadline = (
            None if config.query_timeout is None else self.trace.started_at + config.query_timeout
        )

    @property
    def deadline(self) -> float | None:
        """The ``time.perf_counter()`` instant the query must end by (None: no limit)."""
        return self._deadline

    def remaining(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.perf_counter()

    def check_deadline(self) -> None:
        left = self.remaining()
        if left is not None and left <= 0:
            raise self.timed_out()

    def knob(self, name: str) -> str:
        """What the user sets the limit ``name`` by in the interface in use."""
        return self.config.knobs.get(name, f"ExecutionConfig.{name}")

    def timed_out(self, what: str = "") -> QueryTimeoutError:
        return QueryTimeoutError(
            f"query exceeded query_timeout={self.config.query_timeout}s{what}; "
            f"raise {self.knob('query_timeout')} or lower the work per query"
        )

    def _past(self, limit: Limit, during: str, own: Callable[[], Exception]) -> Exception:
        """The error of a call past ``limit``: the query's deadline (with the time the call
        waited to start, which is no fault of the component) or else the component's own."""
        if not limit.by_deadline():
            return own()
        waited = f" ({limit.waited:.2f}s of it waiting for its turn)" if limit.waited >= 0.01 else ""
        return self.timed_out(f" during {during}{waited}")

    def fatal(self, error: BaseException) -> bool:
        """Whether ``error`` ends the query instead of going back into the plan."""
        return isinstance(error, ConfigurationError) and self.config.misconfiguration == "raise"

    def limit(self, timeout: float | None) -> Limit | None:
        """The bound of one call with its own ``timeout`` under the query's deadline (None: unbounded)."""
        return None if timeout is None and self._deadline is None else Limit(timeout, self._deadline)

    def retrieval_timed_out(self, effect: Retrieve | RetrieveMany) -> Callable[[Limit], Exception]:
        def own() -> Exception:
            query = effect.query if isinstance(effect, Retrieve) else effect.queries[0]
            return RetrievalTimeoutError(
                f"retrieval from {type(effect.backend).__name__} took longer than its "
                f"retrieval_timeout={self.config.retrieval_timeout}s; "
                f"raise {self.knob('retrieval_timeout')} or check the backend",
                query=query,
            )

        return lambda limit: self._past(limit, "a retrieval", own)

    def llm_timed_out(self, limit: Limit) -> Exception:
        def own() -> Exception:
            return LLMTimeoutError(
                f"LLM call took longer than its llm_timeout={self.config.llm_timeout}s; "
                f"raise {self.knob('llm_timeout')}"
            )

        return self._past(limit, "an LLM call", own)

    def _before_back_off(self, seconds: float) -> None:
        left = self.remaining()
        if left is not None and seconds >= left:
            raise self.timed_out(f": a retry would wait {seconds:.2f}s with {max(left, 0):.2f}s left")

    def sleep_sync(self, seconds: float) -> None:
        """The retry back-off, never past the deadline (it raises QueryTimeoutError instead)."""
        self._before_back_off(seconds)
        (self.config.sleep or time.sleep)(seconds)

    async def sleep_async(self, seconds: float) -> None:
        self._before_back_off(seconds)
        await (self.config.async_sleep or asyncio.sleep)(seconds)

    @contextlib.contextmanager
    def slot_sync(self, sem: threading.Semaphore) -> Iterator[None]:
        """A place under the concurrency limit, waited for no longer than the deadline."""
        if not sem.acquire(timeout=self.remaining() if self._deadline is not None else None):
            raise self.timed_out(" waiting for max_concurrency")
        try:
            yield
        finally:
            sem.release()

    @contextlib.asynccontextmanager
    async def slot_async(self, sem: asyncio.Semaphore) -> AsyncIterator[None]:
        try:
            await within(sem.acquire(), None if self._deadline is None else max(self.remaining() or 0, 0))
        except asyncio.TimeoutError:
            raise self.timed_out(" waiting for max_concurrency") from None
        try:
            yield
        finally:
            sem.release()

    def before_attempt(self) -> None:
        self.check_deadline()
        limit = self.config.max_llm_calls
        with self._lock:
            if limit is not None and self._calls >= limit:
                raise BudgetExceededError(
                    f"LLM-call budget of {limit} per query is used up; raise {self.knob('max_llm_calls')}",
                    limit=limit,
                )
            self._calls += 1

    def call_options(self, effect: Generate, sleep: Any) -> dict[str, Any]:
        """Keyword arguments of one LLM call under this run's policy (``sleep``: the
        back-off, :meth:`sleep_sync` or :meth:`sleep_async`)."""
        return {
            "schema": dict(effect.schema) if effect.schema is not None else None,
            "sink": self.on_token if effect.stream else None,
            "timeout": self.config.llm_timeout,
            "deadline": self._deadline,
            "on_timeout": self.llm_timed_out,
            "purpose": effect.purpose,
            "before_attempt": self.before_attempt,
            "sleep": sleep,
            "initial_wait": self.config.retry_initial_wait,
            "max_wait": self.config.retry_max_wait,
            "max_chars": self.config.max_reply_chars,
        }

    # -------------------------------------------------------------- trace helpers
    def record_llm(
        self, effect: Generate, start: float, reply: LLMReply | None, error: Exception | None
    ) -> None:
        # what the LLM received: attempts refused by the budget or the deadline are not calls
        attempts = reply.attempts if reply else getattr(error, "attempts", 0)
        # who answered (OpenTelemetry's gen_ai.* names, selfrag_core.otel), and how it was asked
        detail: dict[str, Any] = {"prompt_chars": len(effect.prompt), **llm_identity(effect.llm)}
        if effect.schema is not None:
            detail["output_type"] = "json"
        if effect.stream and self.on_token is not None:
            detail["stream"] = True
        if self.config.record_content:
            detail.update(prompt=effect.prompt, reply=None if reply is None else reply.text)
        self.trace.add(
            TraceEvent(
                kind="llm",
                name=effect.purpose,
                start_s=start - self.trace.started_at,
                latency_s=time.perf_counter() - start,
                attempts=attempts,
                input_tokens=reply.input_tokens if reply else None,
                output_tokens=reply.output_tokens if reply else None,
                error=None if error is None else f"{type(error).__name__}: {error}",
                detail=detail,
            )
        )
        for name, message in reply.fallbacks if reply else ():  # what the model fell back on
            self.record_note(Note(name, message, {"purpose": effect.purpose}))
        if reply is not None and reply.truncated_from is not None:
            chars = {"reply_chars": reply.truncated_from, "kept_chars": len(reply.text)}
            message = (
                f"the reply held {reply.truncated_from:,} characters; the first {len(reply.text):,} "
                "were kept (ExecutionConfig.max_reply_chars)"
            )
            self.record_note(Note("reply_truncated", message, {"purpose": effect.purpose, **chars}))

    def record_retrieval(
        self, effect: Retrieve, start: float, docs: Sequence[RetrievedDoc] | None, error: Exception | None
    ) -> None:
        self.trace.add(
            TraceEvent(
                kind="retrieval",
                name=type(effect.backend).__name__,
                start_s=start - self.trace.started_at,
                latency_s=time.perf_counter() - start,
                error=None if error is None else f"{type(error).__name__}: {error}",
                detail={
                    "query": effect.query[:200],
                    "top_k": effect.top_k,
                    "hits": len(docs or []),
                    "data_source": data_source_id(effect.backend),
                    "documents": [self._found(doc) for doc in docs or ()],
                },
            )
        )
        unreadable = getattr(docs, "unreadable", ())
        if unreadable:
            name = type(effect.backend).__name__
            self.record_note(
                Note(
                    "retrieval_unreadable",
                    f"{name} returned items that could not be read: {'; '.join(unreadable)}",
                    {"backend": name, "query": effect.query[:200], "unreadable": list(unreadable)},
                )
            )

    def _found(self, doc: RetrievedDoc) -> dict[str, Any]:
        """A retrieved document in the trace: its id and score (and text, where content is recorded)."""
        found: dict[str, Any] = {"id": doc.id, "score": doc.score}
        if self.config.record_content:
            found["text"] = doc.text
        return found

    def record_retrievals(
        self,
        effect: RetrieveMany,
        start: float,
        found: Sequence[Sequence[RetrievedDoc]] | None,
        error: Exception | None,
    ) -> None:
        """One retrieval event per query of a batched ``RetrieveMany`` (as if run one by one)."""
        for i, single in enumerate(effect.each().tasks):
            self.record_retrieval(single, start, None if found is None else found[i], error)

    def note_ignored(
        self, backend: Any, options: Mapping[str, Any], *, use_async: bool, many: bool = False
    ) -> None:
        """A fallback note (once per backend type and options in a query) when a retrieval's
        options (e.g. a ``metadata_filter``) were not passed on: the backend does not take
        them, so its results are not narrowed by them."""
        dropped = tuple(ignored_options(backend, options, use_async=use_async, many=many))
        key = (type(backend), dropped)
        with self._lock:
            if not dropped or key in self._ignored:
                return
            self._ignored.add(key)
        name = type(backend).__name__
        self.record_note(
            Note(
                "retrieval_options_ignored",
                f"{name} does not take {', '.join(dropped)}; it retrieved without "
                f"{'it' if len(dropped) == 1 else 'them'}",
                {"backend": name, "options": list(dropped)},
            )
        )

    def record_note(self, note: Note) -> None:
        if note.kind == "fallback":
            logger.warning("selfrag fallback: %s%s", note.name, f" ({note.error})" if note.error else "")
        self.trace.add(
            TraceEvent(
                kind=note.kind,
                name=note.name,
                start_s=self.trace.elapsed(),
                latency_s=0.0,
                attempts=0,
                error=note.error,
                detail=dict(note.detail),
            )
        )


def _is_plan(task: Any) -> bool:
    return hasattr(task, "send") and hasattr(task, "throw")


def _quiet_task(task: Any) -> Any:
    if _is_plan(task):
        return without_streaming(task)
    if isinstance(task, Generate) and task.stream:
        return task.quiet()
    if isinstance(task, Parallel):
        return Parallel(tuple(_quiet_task(t) for t in task.tasks))
    return task


def without_streaming(plan: Plan[T]) -> Plan[T]:
    """Run a composed child plan with its answer streaming turned off: its answer is
    an intermediate one (a sub-answer, an attempt that may be rejected), so its
    tokens must not reach the caller's stream."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = plan.throw(error) if error is not None else plan.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = (yield _quiet_task(effect)), None
        except Exception as e:
            value, error = None, e


# ------------------------------------------------------------------- the drivers


def _outcomes(results: list[Any], run: Run) -> list[Any]:
    """The results of parallel tasks, where a failed task's entry is its exception;
    raises the first error that ends the query (:meth:`Run.fatal`)."""
    for result in results:
        if isinstance(result, Exception) and run.fatal(result):
            raise result
    return results


def _record(
    run: Run, effect: Call, start: float, result: Any, error: Exception | None, use_async: bool
) -> None:
    """The trace of one LLM call or retrieval, with a note of the options its backend ignored."""
    if isinstance(effect, Generate):
        run.record_llm(effect, start, result, error)
        return
    if isinstance(effect, Retrieve):
        run.record_retrieval(effect, start, result, error)
    else:
        run.record_retrievals(effect, start, result, error)
    if error is None and effect.options:
        many = isinstance(effect, RetrieveMany)
        run.note_ignored(effect.backend, effect.options, use_async=use_async, many=many)


def _queries(effect: Retrieve | RetrieveMany) -> Any:
    """What a retrieval function takes first: the query, or the list of queries."""
    return effect.query if isinstance(effect, Retrieve) else list(effect.queries)


def run_sync(plan: Plan[T], run: Run) -> T:
    """Carry out ``plan`` with blocking calls; parallel tasks run on threads."""
    return _drive_sync(plan, run, threading.Semaphore(run.config.max_concurrency))


def _drive_sync(plan: Plan[T], run: Run, sem: threading.Semaphore) -> T:
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = plan.throw(error) if error is not None else plan.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        try:
            value, error = _exec_sync(effect, run, sem), None
        except Exception as e:
            if run.fatal(e):
                plan.close()
                raise
            value, error = None, e


def _task_sync(task: Any, run: Run, sem: threading.Semaphore) -> Any:
    try:
        return _drive_sync(task, run, sem) if _is_plan(task) else _exec_sync(task, run, sem)
    except Exception as e:
        return e


def _call_sync(effect: Call, run: Run) -> Any:
    if isinstance(effect, Generate):
        return call_llm_detailed(
            effect.llm, effect.prompt, effect.retries, **run.call_options(effect, run.sleep_sync)
        )
    backend = resolve_backend(effect.backend)  # (decided once per backend: a lookup)
    retrieve: Callable[..., Any] = backend.retrieve if isinstance(effect, Retrieve) else backend.retrieve_many
    return call_within(
        lambda: retrieve(_queries(effect), effect.top_k, **effect.options),
        run.config.retrieval_timeout,
        run.retrieval_timed_out(effect),
        run.deadline,
    )


def _begin(effect: Effect, run: Run) -> Call | Parallel | None:
    """What both drivers do with an effect before its call: a RetrieveMany whose backend
    has no batch method becomes a Parallel of Retrieves, a Note is recorded and a
    Deadline checked (None: nothing to call), anything else must be an effect."""
    if isinstance(effect, RetrieveMany) and not effect.batched():
        effect = effect.each()
    if isinstance(effect, Note):
        run.record_note(effect)
        return None
    if isinstance(effect, Deadline):
        effect.check(run)
        return None
    if not isinstance(effect, (Generate, Retrieve, RetrieveMany, Parallel)):
        raise TypeError(f"a plan yielded {effect!r}, which is not an effect")
    return effect


def _settle(effect: Call, error: Exception, run: Run) -> Any:
    """A failed call: a RetrieveMany's failure is each of its queries' outcome; any other
    is raised at the plan's ``yield``."""
    if not isinstance(effect, RetrieveMany):
        raise error
    return _outcomes([error] * len(effect.queries), run)


def _exec_sync(effect: Effect, run: Run, sem: threading.Semaphore) -> Any:
    call = _begin(effect, run)
    if call is None:
        return None
    if isinstance(call, Parallel):
        if len(call.tasks) <= 1:
            return _outcomes([_task_sync(t, run, sem) for t in call.tasks], run)
        # on the library's daemon threads: a task stuck in a call abandoned at its
        # timeout never holds up the interpreter's exit
        futures = [TASKS.submit(_task_sync, t, run, sem) for t in call.tasks]
        return _outcomes([f.result() for f in futures], run)
    try:
        if not isinstance(call, Generate):
            run.check_deadline()
        with run.slot_sync(sem):
            start = time.perf_counter()
            try:
                result = _call_sync(call, run)
            except Exception as e:
                _record(run, call, start, None, e, use_async=False)
                raise
            _record(run, call, start, result, None, use_async=False)
            return result
    except Exception as e:
        return _settle(call, e, run)


async def run_async(plan: Plan[T], run: Run) -> T:
    """Carry out ``plan`` on the running event loop; parallel tasks are gathered."""
    return await _drive_async(plan, run, asyncio.Semaphore(run.config.max_concurrency))


async def _drive_async(plan: Plan[T], run: Run, sem: asyncio.Semaphore) -> T:
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = plan.throw(error) if error is not None else plan.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        if type(effect) is Note:  # a trace entry: recorded here, without a coroutine
            run.record_note(effect)
            value, error = None, None
            continue
        try:
            value, error = await _exec_async(effect, run, sem), None
        except Exception as e:
            if run.fatal(e):
                plan.close()
                raise
            value, error = None, e


async def _task_async(task: Any, run: Run, sem: asyncio.Semaphore) -> Any:
    try:
        return await (_drive_async(task, run, sem) if _is_plan(task) else _exec_async(task, run, sem))
    except Exception as e:
        return e


async def _call_async(effect: Call, run: Run) -> Any:
    if isinstance(effect, Generate):
        options = run.call_options(effect, run.sleep_async)
        return await acall_llm_detailed(effect.llm, effect.prompt, effect.retries, **options)
    backend = resolve_backend(effect.backend)
    retrieve: Callable[..., Any] = backend.aretrieve_many
    if isinstance(effect, Retrieve):
        retrieve = backend.aretrieve
    retrieval = retrieve(_queries(effect), effect.top_k, **effect.options)
    limit = run.limit(run.config.retrieval_timeout)
    if limit is None:
        return await retrieval
    return await awaited_within(retrieval, limit, run.retrieval_timed_out(effect))


async def _exec_async(effect: Effect, run: Run, sem: asyncio.Semaphore) -> Any:
    call = _begin(effect, run)
    if call is None:
        return None
    if isinstance(call, Parallel):
        results = await asyncio.gather(*(_task_async(t, run, sem) for t in call.tasks))
        return _outcomes(list(results), run)
    try:
        if not isinstance(call, Generate):
            run.check_deadline()
        async with run.slot_async(sem):
            start = time.perf_counter()
            try:
                result = await _call_async(call, run)
            except Exception as e:
                _record(run, call, start, None, e, use_async=True)
                raise
            _record(run, call, start, result, None, use_async=True)
            return result
    except Exception as e:
        return _settle(call, e, run)
