"""What every strategy shares: input validation, the sync/async entry points, and
small plan helpers (retrieval with fallback, context formatting)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from selfrag_core.citations import cite, renumber
from selfrag_core.config import ExecutionConfig, StrategyConfig
from selfrag_core.engine import (
    Deadline,
    Generate,
    Note,
    Parallel,
    Plan,
    Retrieve,
    Run,
    run_async,
    run_sync,
    without_streaming,
)  # fmt: skip
from selfrag_core.errors import QueryTimeoutError, RAGSystemError, StrategyError
from selfrag_core.grounding import (
    clean_answer,
    degenerate_reason,
    is_instruction,
    is_refusal,
    question_coverage,
)
from selfrag_core.llm import LLMReply
from selfrag_core.prompts import Prompts, detect_language, document_blocks, without_document_tags
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.questions import split_question
from selfrag_core.retrieval import _deduplicate, _doc_key
from selfrag_core.types import Result, RetrievedDoc, Trace, TraceEvent, _json_safe
from selfrag_core.validation import validate_context, validate_query
from selfrag_core.verify import split_sentences

R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S", bound="Strategy[Any]")


#: the answer when no acceptable answer could be generated (as in the reference specification)
GENERATION_FAILED_ANSWER = "error in generating answer"
#: the answer when retrieval finds nothing (as in the reference specification)
NOT_ENOUGH_ANSWER = "There is not enough information."


def format_context(docs: list[RetrievedDoc], limit: int | None = None, max_chars: int | None = None) -> str:
    """The documents as the prompts show them: numbered, fenced blocks with their
    source (:func:`~selfrag_core.prompts.document_blocks`), the first ``limit`` of them,
    within ``max_chars`` characters."""
    chosen = docs if limit is None else docs[:limit]
    return document_blocks(((d.text, d.source, "") for d in chosen), max_chars)


def context_text(docs: list[RetrievedDoc]) -> str:
    """The documents' text alone, for the LLM-free checks."""
    return "\n\n".join(d.text.strip() for d in docs)


def answer_text(reply: str) -> str:
    """The answer in a model's reply: without the document fences it copied from its
    prompt, a preamble ("The answer is:", "Improved answer:", "الإجابة هي:") or a title
    line (:func:`~selfrag_core.grounding.clean_answer`)."""
    return clean_answer(without_document_tags(reply))


def checked_answer(answer: str, query: str, docs: list[RetrievedDoc]) -> Plan[str]:
    """A strategy's final answer; when it is unusable (``grounding.degenerate_reason``:
    empty, a loop, an echo of the prompt or the question, a refusal although the context
    covers the question, a copy of an instruction planted in a document, a key name, an
    identifier, a date the context does not hold), the source sentence that answers the
    question, quoted (:func:`quoted_answer`), else :data:`GENERATION_FAILED_ANSWER`, with
    the reason in the trace. :func:`answer_text` cleans it first. Past the query's
    deadline it is not checked: the fallback answer, with the QueryTimeoutError in the
    trace (reason ``query_timeout``)."""
    try:
        yield Deadline("checking the answer")
    except QueryTimeoutError as e:
        detail = {"reason": "query_timeout", "then": "fallback answer"}
        yield Note("answer_rejected", f"{type(e).__name__}: {e}", detail)
        return GENERATION_FAILED_ANSWER
    answer = answer_text(answer)
    reason = degenerate_reason(answer, query, context_text(docs))
    if reason is None:
        return answer
    quote = quoted_answer(query, docs)
    detail = {"reason": reason, "answer": answer[:200], "then": "a quote" if quote else "fallback answer"}
    yield Note("answer_rejected", f"the answer is unusable: {reason}", detail)
    return quote or GENERATION_FAILED_ANSWER


#: the share of the question's words a source sentence must hold to be quoted as its answer
QUOTE_COVERAGE = 0.5


def quoted_answer(query: str, docs: list[RetrievedDoc]) -> str | None:
    """The source sentence that speaks most to ``query`` (the largest share of its words,
    :func:`~selfrag_core.grounding.question_coverage`; at least :data:`QUOTE_COVERAGE`),
    quoted with its source's marker (``"Honeybees dance to show the way." [1]``): what a
    strategy answers instead of the placeholder when the model's answer is unusable but
    a document holds one. None when no sentence does (or only a planted instruction)."""
    best, best_coverage = None, QUOTE_COVERAGE
    for number, doc in enumerate(docs, 1):
        for sentence in split_sentences(doc.text):
            if is_instruction(sentence):
                continue
            coverage = question_coverage(sentence, query, sentence)
            if coverage > best_coverage or (best is None and coverage >= best_coverage):
                best, best_coverage = f"\u201c{sentence}\u201d [{number}]", coverage
    return best


def retrieve_or_empty(
    backend: Any, query: str, top_k: int, options: Mapping[str, Any] | None = None
) -> Plan[list[RetrievedDoc]]:
    """Retrieve; on failure record the fallback and continue with no documents."""
    try:
        docs: list[RetrievedDoc] = yield Retrieve(backend, query, top_k, dict(options or {}))
    except RAGSystemError as e:
        yield Note("retrieval_failed", f"{type(e).__name__}: {e}", {"query": query[:200]})
        return []
    return docs


def retrieval_options(context: Mapping[str, Any]) -> dict[str, Any]:
    """Backend keyword options carried in a query's ``context`` (passed where accepted)."""
    return {k: context[k] for k in ("metadata_filter", "filters") if k in context}


def retrieve_and_answer(
    strategy: Strategy[Any], query: str, context: Mapping[str, Any], top_k: int, retries: int
) -> Plan[tuple[str | None, list[RetrievedDoc]]]:
    """One retrieval and one grounded answer (streamed), checked: what
    :class:`~selfrag_core.strategies.plain.PlainRAG` does by default and ``RecursiveRAG``
    gives a question it does not decompose. The answer is None when retrieval found nothing;
    a failed LLM call raises at its ``yield``."""
    docs = yield from retrieve_or_empty(strategy.rag_system, query, top_k, retrieval_options(context))
    if not docs:
        yield Note("not_enough_information", "retrieval returned no documents", {"query": query[:200]})
        return None, []
    answer = yield from grounded_answer(strategy, query, docs, retries)
    return answer, docs


#: a part of the question the answer covers less than this (``grounding.question_coverage``) is missing
PART_COVERAGE = 0.5


def missing_parts(query: str, answer: str, docs: list[RetrievedDoc]) -> list[str]:
    """The parts of a question of several parts (:func:`~selfrag_core.questions.split_question`)
    that ``answer`` leaves out: those whose words neither the answer nor the place in
    ``docs`` it comes from cover (``question_coverage`` under :data:`PART_COVERAGE`)."""
    parts = split_question(query)
    if len(parts) < 2:
        return []
    context = context_text(docs)
    return [p for p in parts if question_coverage(answer, p, context) < PART_COVERAGE]


def complete_parts(
    strategy: Strategy[Any], query: str, answer: str, docs: list[RetrievedDoc], top_k: int, retries: int,
    options: Mapping[str, Any] | None = None,
) -> Plan[tuple[str, list[RetrievedDoc]]]:  # fmt: skip
    """``answer`` with the parts of the question it leaves out (:func:`missing_parts`)
    answered too: each part retrieved and answered in one parallel round, its answer
    appended as a paragraph with its ``[n]`` markers counted in the merged sources. The
    answer and ``docs`` as they were when no part is missing or none could be answered."""
    missing = missing_parts(query, answer, docs)
    if not missing:
        return answer, docs
    yield Note("incomplete_answer", None, {"parts": missing, "then": "answer each part"}, kind="progress")
    plans = tuple(without_streaming(_part(strategy, part, top_k, retries, options)) for part in missing)
    outcomes = yield Parallel(plans)
    sources = list(docs)
    paragraphs = [answer]
    for part, outcome in zip(missing, outcomes, strict=True):
        if isinstance(outcome, BaseException) or outcome[0] is None:
            why = (
                f"{type(outcome).__name__}: {outcome}"
                if isinstance(outcome, BaseException)
                else "no documents"
            )
            yield Note("part_unanswered", why, {"part": part[:200]})
            continue
        part_answer, part_docs = outcome
        sources = _deduplicate(sources + part_docs)
        position = {_doc_key(d): i for i, d in enumerate(sources, 1)}
        paragraphs.append(
            renumber(part_answer, {i: position[_doc_key(d)] for i, d in enumerate(part_docs, 1)})
        )
    return "\n\n".join(paragraphs), sources


def _part(
    strategy: Strategy[Any], part: str, top_k: int, retries: int, options: Mapping[str, Any] | None
) -> Plan[tuple[str | None, list[RetrievedDoc]]]:
    """One part of the question retrieved and answered; (None, []) for an unusable answer."""
    answer, docs = yield from retrieve_and_answer(strategy, part, dict(options or {}), top_k, retries)
    if answer in (None, GENERATION_FAILED_ANSWER):
        return None, []
    return answer, docs


def grounded_reply(strategy: Strategy[Any], query: str, docs: list[RetrievedDoc], retries: int) -> Plan[str]:
    """The ``grounded_answer`` prompt's reply from ``docs`` (streamed), unchecked; a failed
    LLM call raises at its ``yield``."""
    prompt = strategy.prompts.render(
        "grounded_answer", detect_language(query), context=format_context(docs), question=query
    )
    reply: LLMReply = yield Generate(strategy.llm, prompt, "answer", retries, stream=True)
    return reply.text


def grounded_answer(strategy: Strategy[Any], query: str, docs: list[RetrievedDoc], retries: int) -> Plan[str]:
    """The ``grounded_answer`` prompt's answer from ``docs`` (streamed), checked
    (:func:`checked_answer`); a failed LLM call raises at its ``yield``."""
    reply = yield from grounded_reply(strategy, query, docs, retries)
    return (yield from checked_answer(reply.strip(), query, docs))


def no_answer_reason(answer: str, documents: list[RetrievedDoc], trace: Trace) -> str | None:
    """Why ``answer`` is no answer (a key of :data:`~selfrag_core.types.NO_ANSWER_REASONS`),
    or None when it is one: it is empty or a placeholder (:data:`GENERATION_FAILED_ANSWER`,
    a strategy's "not enough information" answer), and the trace says why: the query's
    time or LLM-call budget ran out, the LLM or the backend failed, every reply was
    unusable, or no document was found (or those found do not hold the answer)."""
    text = answer.strip()
    if text and text != GENERATION_FAILED_ANSWER and text not in _no_information_answers():
        return None
    errors = [e.error or "" for e in trace.events]
    reasons = [str(e.detail.get("reason", "")) for e in trace.fallbacks]
    timed_out = any(e.startswith(("QueryTimeoutError", "LLMTimeoutError")) for e in errors)
    if timed_out or "query_timeout" in reasons:
        return "timeout"
    if any(e.startswith("BudgetExceededError") for e in errors):
        return "budget_exceeded"
    if any(e.kind == "llm" and e.error for e in trace.events):
        return "generation_failed"
    if any(e.kind == "retrieval" and e.error for e in trace.events):
        return "retrieval_failed"
    if text == GENERATION_FAILED_ANSWER:
        rejected = any(e.name == "answer_rejected" for e in trace.fallbacks)
        return "unusable_answer" if rejected else "generation_failed"
    return "not_in_documents" if documents else "no_documents"


def _no_information_answers() -> frozenset[str]:
    """The strategies' answers when nothing could be found to answer from."""
    from selfrag_core.strategies.hyde import INSUFFICIENT_ANSWER
    from selfrag_core.strategies.self_healing import NO_CONTEXT_ANSWER

    return frozenset({NOT_ENOUGH_ANSWER, INSUFFICIENT_ANSWER, NO_CONTEXT_ANSWER})


#: the kinds of :class:`Step`, in the order a query usually meets them
STEP_KINDS = ("retrieval", "hypothesis", "sub_question", "verdict", "attempt", "fallback")


@dataclass(frozen=True)
class Step:
    """One step of a query before (or around) its answer, as a stream shows it: a trace
    event (:class:`~selfrag_core.types.TraceEvent`) of one of the :data:`STEP_KINDS`
    (see :func:`step_of` for which event is which step).

    ``kind``: ``"retrieval"`` (a retrieval ended: ``detail`` has ``query``, ``top_k`` and
    ``hits``, the number of documents found), ``"hypothesis"`` (HyDE wrote a hypothetical
    passage), ``"sub_question"`` (``question``, ``depth`` and ``status``: ``started``,
    ``answered`` with its ``answer``, or ``failed``), ``"verdict"`` (a judge's verdict:
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


#: LLM calls that are steps, by purpose
_STEP_CALLS = {"hyde_document": "hypothesis"}
#: notes that are steps, by name, other than fallbacks
_STEP_NOTES = {"sub_question": "sub_question", "verdict": "verdict", "below_threshold": "attempt"}


def step_of(event: TraceEvent) -> Step | None:
    """The step that ``event`` stands for, or None (LLM calls other than HyDE's passages,
    decisions and progress notes that are none of the :data:`STEP_KINDS`): every
    retrieval; every ``hyde_document`` call (a hypothesis); the ``sub_question`` and
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
        kind = _STEP_CALLS.get(event.name)
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
            "pass SelfIRAG, HyDERAG, RecursiveRAG, SelfHealingRAG or a Strategy subclass of yours"
        )
    return strategy


def _finish_of(strategy: Any) -> Callable[[Any, Run], Any]:
    finish: Callable[[Any, Run], Any] = getattr(strategy, "finish", None) or Strategy.finish_trace
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


def run_query(
    strategy: Any, query: str, context: Mapping[str, Any] | None = None, *, run: Run | None = None
) -> Any:
    """Answer ``query`` with ``strategy`` (anything with ``plan(query, context)``) with
    blocking calls: safe inside a running event loop. ``run``: the per-query state
    (:class:`~selfrag_core.engine.Run`); default ``Run(strategy.execution)``. Returns the
    finished result (its trace and wall time set); a StrategyError keeps its finished
    report. ``Strategy.query``, the CLI, the HTTP service and both adapters run this."""
    plan = strategy.plan(query, context)
    run = run if run is not None else Run(_execution_of(strategy))
    with _reports_finished(strategy, run):
        result = run_sync(plan, run)
    return _finish_of(strategy)(result, run)


async def arun_query(
    strategy: Any, query: str, context: Mapping[str, Any] | None = None, *, run: Run | None = None
) -> Any:
    """Async :func:`run_query`, on the running event loop (no thread when the LLM and the
    backend are async)."""
    plan = strategy.plan(query, context)
    run = run if run is not None else Run(_execution_of(strategy))
    with _reports_finished(strategy, run):
        result = await run_async(plan, run)
    return _finish_of(strategy)(result, run)


def _documents_plan(strategy: Any, query: str, context: Mapping[str, Any] | None, top_k: int | None) -> Any:
    """``strategy``'s own ranking plan for ``query`` when it has one (``documents_plan``:
    HyDE's fused ranking), else None: the one place the retrievers' choice is made."""
    own = getattr(strategy, "documents_plan", None)
    return own(query, context, top_k) if callable(own) else None


def _at_most(docs: Any, top_k: int | None) -> list[RetrievedDoc]:
    return list(docs or ())[:top_k] if top_k is not None else list(docs or ())


def retrieve_documents(
    strategy: Any, query: str, top_k: int | None = None, context: Mapping[str, Any] | None = None
) -> list[RetrievedDoc]:
    """The documents ``strategy`` finds for ``query``, at most ``top_k``: what a retriever
    returns (both adapters' retrievers call this). A strategy with its own ranking
    (``documents_plan(query, context, top_k)``, as HyDERAG's fused ranking: one LLM round,
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
    return _stream(strategy, strategy.plan(query, context))


def _streamed_run(strategy: Any, put: Callable[[StreamEvent[Any]], None]) -> Run:
    """The run of a streamed query: its tokens and steps go to ``put`` in the order they
    happen (a listener of :func:`~selfrag_core.engine.observe_trace` still hears every
    trace event)."""
    run = Run(_execution_of(strategy), on_token=lambda text: put(StreamEvent("token", text)))
    outer = run.trace.listener

    def listener(event: TraceEvent) -> None:
        if outer is not None:
            outer(event)
        step = step_of(event)
        if step is not None:
            put(StreamEvent("step", step=step))

    run.trace.listener = listener
    return run


def _stream(strategy: Any, plan: Plan[Any]) -> Iterator[StreamEvent[Any]]:
    events: queue.Queue[StreamEvent[Any] | BaseException] = queue.Queue()
    run = _streamed_run(strategy, events.put)

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
    return _astream(strategy, strategy.plan(query, context))


async def _astream(strategy: Any, plan: Plan[Any]) -> AsyncIterator[StreamEvent[Any]]:
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[StreamEvent[Any]] = asyncio.Queue()
    on_loop = threading.get_ident()

    def put(event: StreamEvent[Any]) -> None:  # on the loop, or from a worker thread for sync calls
        if threading.get_ident() == on_loop:
            events.put_nowait(event)
        else:
            loop.call_soon_threadsafe(events.put_nowait, event)

    run = _streamed_run(strategy, put)
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


class Strategy(Generic[R]):
    """Base of every strategy: one plan, run by the engine sync, async or streamed.

    A strategy implements one method, ``_plan(query, context)``: a generator that
    yields effects (``Generate``, ``Retrieve``, ``RetrieveMany``, ``Parallel``, ``Note``
    from :mod:`selfrag_core.engine`), receives their results, and returns its result (a
    dataclass with ``answer``, ``sources`` and ``trace``, or any object with an
    ``answer``). A failed effect is raised at its ``yield``, so fallbacks are ordinary
    ``try``/``except``; another strategy composes by ``yield from other.plan(q, ctx)``.
    ``query``/``aquery``/``stream``/``astream`` then come for free, and the strategy runs
    under the CLI, the HTTP service and both adapters like the built-in ones.
    """

    #: the retrieval backend (None for a strategy over several, such as SelfHealingRAG)
    rag_system: BackendLike | None
    llm: LLMLike
    #: the strategy's settings (a StrategyConfig of the built-in ones; a query's context
    #: overrides them by name, see for_call); a strategy of yours may have none
    config: Any

    def __init__(
        self,
        rag_system: BackendLike,
        llm: LLMLike,
        *,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
    ) -> None:
        if rag_system is None:
            raise ValueError("rag_system is required: pass a retrieval backend (retrieve(query, top_k))")
        self.rag_system = rag_system
        self._configure(llm, execution, prompts)

    def _configure(
        self, llm: LLMLike, execution: ExecutionConfig | None, prompts: Mapping[str, str] | Prompts | None
    ) -> None:
        """What every strategy has: its LLM, its ``ExecutionConfig`` and its prompts."""
        if not llm:
            raise ValueError(
                "llm is required: pass an LLM object (generate(prompt) -> str, or a framework LLM)"
            )
        self.llm = llm
        if execution is not None and not isinstance(execution, ExecutionConfig):
            raise TypeError("execution must be an ExecutionConfig")
        self.execution = execution or ExecutionConfig()
        self.prompts = Prompts(prompts)

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[R]:
        raise NotImplementedError

    def plan(self, query: str, context: Mapping[str, Any] | None = None) -> Plan[R]:
        """The validated plan of one query, for composing strategies (``yield from``);
        the context's per-call overrides apply (:meth:`for_call`)."""
        query, checked = validate_query(query), validate_context(context)
        return self.for_call(checked)._plan(query, checked)

    def for_call(self: S, context: Mapping[str, Any] | None) -> S:
        """The strategy as one call with ``context`` runs it: itself, or, when the context
        names settings of its ``config`` (a :class:`~selfrag_core.config.StrategyConfig`),
        a shallow copy whose config has them (``{"top_k": 3}``; validated, so a bad value
        raises ConfigurationError here, before anything runs)."""
        config = getattr(self, "config", None)
        if not isinstance(config, StrategyConfig):
            return self
        overridden = config.with_overrides(context)
        if overridden is config:
            return self
        clone = copy.copy(self)
        clone.config = overridden
        return clone

    def query(self, query: str, context: Mapping[str, Any] | None = None) -> R:
        """Answer ``query``. Safe to call from inside a running event loop."""
        result: R = run_query(self, query, context)
        return result

    async def aquery(self, query: str, context: Mapping[str, Any] | None = None) -> R:
        """Answer ``query`` on the running event loop (no thread when the LLM is async)."""
        result: R = await arun_query(self, query, context)
        return result

    def stream(self, query: str, context: Mapping[str, Any] | None = None) -> Iterator[StreamEvent[R]]:
        """Answer ``query``, yielding the final answer's text as it is generated, then
        the result (see :func:`stream_query`)."""
        return stream_query(self, query, context)

    def astream(self, query: str, context: Mapping[str, Any] | None = None) -> AsyncIterator[StreamEvent[R]]:
        """Async :meth:`stream`."""
        return astream_query(self, query, context)

    def finish(self, result: R, run: Run) -> R:
        """The last step of every run: the result gets the run's trace and wall time.
        Subclasses extend it (SelfHealingRAG fills each attempt's usage)."""
        return Strategy.finish_trace(result, run)

    @staticmethod
    def finish_trace(result: T, run: Run) -> T:
        """The result (a :class:`~selfrag_core.types.Result`) gets the run's trace and wall
        time, why it holds no answer (``no_answer``, :func:`no_answer_reason`, unless its
        plan said), and the citations of its answer (:func:`~selfrag_core.citations.cite`,
        unless its plan computed them on the way; none for a refusal or a fallback). Past
        the query's deadline they are not computed: a ``citations_skipped`` note holds the
        QueryTimeoutError. Another object is returned as it is."""
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
                    result.citations = cite(answer, result.documents)
                except QueryTimeoutError as e:
                    run.record_note(
                        Note("citations_skipped", f"{type(e).__name__}: {e}", {"then": "no citations"})
                    )
        run.trace.wall_s = run.trace.elapsed()
        return result

    def add_document(self, text: str, metadata: dict[str, Any] | None = None) -> Any:
        """Pass-through to the backend's ``add_document`` (metadata defaults to {})."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text must be a non-empty string")
        adder = getattr(getattr(self, "rag_system", None), "add_document", None)
        if adder is None:
            name = type(getattr(self, "rag_system", None)).__name__
            raise TypeError(f"{name} has no add_document(text, metadata); add documents to the backend")
        return adder(text, metadata if metadata is not None else {})
