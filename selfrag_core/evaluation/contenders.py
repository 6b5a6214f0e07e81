"""What ``evaluate`` compares: contenders that answer a question (and, where they can,
rank documents for it), each turned into one :class:`Outcome` shape.

A contender is one of:

* a built-in strategy by name (an entry of :data:`selfrag_core.strategies.registry.BUILT_IN`:
  ``plain``, ``self``, ``recursive``, ``adaptive``, ...; sized as the CLI
  sizes them, see :func:`selfrag_core.presets.build_strategy`), or ``"file.py:Name"`` /
  ``"package.module:Name"`` for a strategy of your own;
* any strategy object (a ``Strategy``, built-in or yours, composed or not);
* a LangChain runnable (``invoke``): its output may be a string, a message, or a dict
  with the answer (``answer``, ``result``, ...) and the documents it used (``context``,
  ``source_documents``, ...); its LLM calls and tokens are counted through callbacks;
* a LlamaIndex query engine (``query`` returning a ``Response`` with ``source_nodes``);
* a callable ``f(question)`` returning any of the above, or a strategy's result.

The frameworks' objects are recognised by :mod:`selfrag_core.frameworks`, without
importing either framework.

So an outside contender's answer is one of: a string; a message whose ``content`` is a
string or text blocks (``{"type": "text", "text": ...}``); a mapping with one of those
under ``answer``, ``result``, ``output`` or ``response`` (the first present); a
``Response`` whose ``response`` is a string; a strategy's ``Result`` (its ``answer``,
``sources`` and trace). Anything else (bytes, a list, None, a mapping without an answer)
is that question's error (:class:`ContenderOutputError`), never scored as text.

Outside contenders report no trace, so their fallbacks are unknown; a LlamaIndex
engine's LLM calls are unknown too (shown as such, never as zero).
"""

from __future__ import annotations

import reprlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from selfrag_core import frameworks
from selfrag_core.engine import Run, run_sync
from selfrag_core.errors import ConfigurationError, RAGSystemError, StrategyError
from selfrag_core.retrieval import normalize_results
from selfrag_core.runner import run_query
from selfrag_core.strategies.adaptive import route_signals
from selfrag_core.strategies.base import Strategy
from selfrag_core.strategies.plain import PlainRAG
from selfrag_core.types import Answer, Result, RetrievedDoc, Trace

_ANSWER_KEYS = ("answer", "result", "output", "response")
_DOCUMENT_KEYS = ("context", "source_documents", "documents", "sources", "source_nodes")
#: the shapes an answer may come in, for the error when it comes in another
_SHAPES = (
    "expected a string, a message with text content, a mapping with the answer string under "
    f"{_ANSWER_KEYS[0]!r} (or {', '.join(map(repr, _ANSWER_KEYS[1:]))}), a Response with a string "
    ".response, or a result with a string .answer"
)


class ContenderOutputError(RAGSystemError, TypeError):
    """A contender returned something that is not an answer (the shapes it may take: the
    module docstring). ``evaluate`` records it as that question's error."""


@dataclass
class Outcome:
    """What one contender did with one question."""

    answer: str
    sources: list[RetrievedDoc] = field(default_factory=list)
    latency_s: float = 0.0
    trace: Trace | None = None  # None: an outside contender, whose inner steps are unknown
    llm_calls: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None  # the contender raised: the answer is empty, the question still counts
    #: the routing signals of the baseline's answer (``route_signals``): what ``--fit-router`` fits on
    signals: dict[str, float] | None = None


@dataclass
class Contender:
    """A name and how it answers: ``answer(question) -> Outcome``; ``rank(question, k)``
    gives the documents it would answer from, ``k`` of them, without answering (None
    where the contender cannot: a strategy whose ``ranking()`` is None)."""

    name: str
    answer: Callable[[str], Outcome]
    rank: Callable[[str, int], Outcome] | None = None


def timed(name: str, work: Callable[[], Outcome]) -> Outcome:
    """``work()`` with its wall time, or an empty outcome naming the failure."""
    start = time.perf_counter()
    try:
        outcome = work()
    except ConfigurationError:  # the setup is wrong (a cache miss under replay, ...): stop
        raise
    except Exception as e:  # a contender that raises on one question: counted, never fatal
        outcome = Outcome("", error=f"{name}: {type(e).__name__}: {e}")
    outcome.latency_s = time.perf_counter() - start
    return outcome


def _from_result(result: Result[Any]) -> Outcome:
    trace = result.trace
    answer = _text(result.answer, f"{_a(result)} whose .answer is ")
    outcome = Outcome(answer, result.documents, trace=trace)
    outcome.llm_calls = trace.llm_calls
    if any(e.kind == "llm" and e.input_tokens is not None for e in trace.events):  # else unknown
        outcome.input_tokens, outcome.output_tokens = trace.input_tokens, trace.output_tokens
    return outcome


def strategy_contender(name: str, strategy: Strategy[Any], rag: Any = None) -> Contender:
    """A strategy as a contender, ranking as its ``ranking()`` says
    (:meth:`~selfrag_core.strategies.base.Strategy.ranking`): its own ranking plan, run
    with its calls and tokens counted, or ``"search"``, one search of ``rag`` (the backend
    the run searches; None: it cannot rank)."""

    def answer(question: str) -> Outcome:
        try:
            result = run_query(strategy, question)
            outcome = _from_result(result) if isinstance(result, Result) else read_output(result)
            if isinstance(strategy, PlainRAG):  # what a router fitted on this run reads
                verifier = strategy.verifier  # its support signal as AdaptiveRAG reads it
                outcome.signals = route_signals(question, outcome.sources, outcome.answer, verifier=verifier)
            return outcome
        except StrategyError as e:  # SelfHealingRAG: every attempt failed; its report says how
            if e.report is None:
                raise
            outcome = _from_result(e.report)
            outcome.error = f"{name}: {e}"
            return outcome

    rank: Callable[[str, int], Outcome] | None = None
    ranking = strategy.ranking()
    if callable(ranking):  # its own ranking plan

        def rank(question: str, k: int) -> Outcome:
            run = Run(strategy.execution)
            docs = run_sync(ranking(question, k), run)
            run.trace.wall_s = run.trace.elapsed()
            return _from_result(Answer("", list(docs), trace=run.trace))  # with its calls and tokens

    elif rag is not None and ranking == "search":

        def rank(question: str, k: int) -> Outcome:
            return Outcome("", normalize_results(rag.retrieve(question, k)), llm_calls=0)  # a search

    return Contender(name, answer, rank)


def outside_contender(name: str, target: Any) -> Contender:
    """A LangChain runnable, a LlamaIndex query engine or a callable as a contender."""
    if frameworks.is_langchain_runnable(target):
        return Contender(name, lambda question: _invoke_langchain(target, question))
    if frameworks.is_llamaindex_query_engine(target):
        return Contender(name, lambda question: read_output(target.query(question)))
    if callable(target):
        return Contender(name, lambda question: read_output(target(question)))
    raise TypeError(
        f"contender {name!r} is a {type(target).__name__}: give a strategy (or its name), a LangChain "
        "runnable, a LlamaIndex query engine or a callable f(question)"
    )


def read_output(output: Any) -> Outcome:
    """An outside contender's answer and documents, in one of the shapes the module
    docstring lists; another shape raises :class:`ContenderOutputError` naming it."""
    if isinstance(output, str):
        return Outcome(output)
    if isinstance(output, Mapping):
        key = next((k for k in _ANSWER_KEYS if k in output), None)
        if key is None:
            keys = ", ".join(map(repr, list(output)[:5])) or "none"
            raise ContenderOutputError(
                f"returned {_a(output)} without an answer (its keys: {keys}); {_SHAPES}"
            )
        answer = _text(output[key], f"{_a(output)} whose {key!r} is ")
        documents = next((output[k] for k in _DOCUMENT_KEYS if k in output), ())
    elif isinstance(output, Result):  # a strategy's result: its sources and trace too
        outcome = _from_result(output)
        outcome.sources = normalize_results(outcome.sources)
        return outcome
    elif frameworks.is_llamaindex_response(output):
        answer = _text(output.response, f"{_a(output)} whose .response is ")
        documents = output.source_nodes
    else:  # a message
        answer, documents = _text(output), ()
    return Outcome(answer, normalize_results(list(documents or ())))


def _text(value: Any, what: str = "") -> str:
    """``value`` as an answer: a string, or a message's text (its ``content``, a string or
    text blocks); else a ContenderOutputError saying what came (``what`` the value)."""
    if isinstance(value, str):
        return value
    content = getattr(value, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b if isinstance(b, str) else b.get("text") for b in content if _is_text_block(b)]
        if texts and all(isinstance(t, str) for t in texts):
            return "".join(texts)
    shown = "None" if value is None else f"{type(value).__name__} {reprlib.repr(value)}"
    raise ContenderOutputError(f"returned {what}{shown}; {_SHAPES}")


def _is_text_block(block: Any) -> bool:
    return isinstance(block, str) or (isinstance(block, Mapping) and block.get("type") == "text")


def _a(value: Any) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _invoke_langchain(runnable: Any, question: str) -> Outcome:
    counter = _langchain_counter()
    if counter is None:
        return read_output(runnable.invoke(question))
    outcome = read_output(runnable.invoke(question, config={"callbacks": [counter]}))
    outcome.llm_calls = counter.calls
    outcome.input_tokens, outcome.output_tokens = counter.input_tokens, counter.output_tokens
    return outcome


def _langchain_counter() -> Any:
    """A LangChain callback handler counting LLM calls and tokens (None without LangChain)."""
    try:
        from langchain_core.callbacks import BaseCallbackHandler
    except ImportError:
        return None

    class Counter(BaseCallbackHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            self.calls = 0
            self.input_tokens: int | None = None
            self.output_tokens: int | None = None

        def on_llm_end(self, response: Any, **kwargs: Any) -> None:
            self.calls += 1
            for generations in getattr(response, "generations", []):
                for generation in generations:
                    usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
                    if isinstance(usage, dict):
                        self.input_tokens = (self.input_tokens or 0) + int(usage.get("input_tokens") or 0)
                        self.output_tokens = (self.output_tokens or 0) + int(usage.get("output_tokens") or 0)

    return Counter()


def as_contender(name: str, target: Any, rag: Any = None) -> Contender:
    """``target`` (a strategy, a framework object or a callable) as a contender."""
    if isinstance(target, Contender):
        return target
    if isinstance(target, Strategy):
        return strategy_contender(name, target, rag)
    return outside_contender(name, target)
