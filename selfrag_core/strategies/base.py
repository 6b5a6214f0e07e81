"""What every strategy shares: input validation, the sync/async entry points, and
small plan helpers (retrieval with fallback, context formatting)."""

from __future__ import annotations

import copy
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, Union

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
    without_streaming,
)  # fmt: skip
from selfrag_core.errors import QueryTimeoutError, RAGSystemError
from selfrag_core.grounding import (
    clean_answer,
    degenerate_reason,
    is_instruction,
    question_coverage,
)
from selfrag_core.llm import LLMReply
from selfrag_core.prompts import Prompts, detect_language, document_blocks, without_document_tags
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.questions import split_question
from selfrag_core.retrieval import _deduplicate, _doc_key
from selfrag_core.runner import (
    STEP_CALLS,
    STEP_KINDS,
    StreamEvent,
    arun_query,
    astream_query,
    finish_trace,
    run_query,
    stream_query,
)  # fmt: skip
from selfrag_core.signals.choice import quote_chosen
from selfrag_core.signals.features import relevance_features
from selfrag_core.signals.fitted import shipped
from selfrag_core.signals.rules import AnswerRule
from selfrag_core.signals.text import split_sentences

# the placeholder answers, importable here as before
from selfrag_core.types import GENERATION_FAILED_ANSWER as GENERATION_FAILED_ANSWER
from selfrag_core.types import NOT_ENOUGH_ANSWER as NOT_ENOUGH_ANSWER
from selfrag_core.types import RetrievedDoc
from selfrag_core.validation import validate_context, validate_query
from selfrag_core.verify import verify_answer

if TYPE_CHECKING:
    from selfrag_core.memory import ConversationMemory
    from selfrag_core.verify import Verifier

R = TypeVar("R")
T = TypeVar("T")
S = TypeVar("S", bound="Strategy[Any]")
#: how a strategy ranks documents without answering (:meth:`Strategy.ranking`): ``"search"``
#: (one search of the backend), or ``ranking(question, k)``, the plan of its ``k`` documents
Ranking = Union[Literal["search"], Callable[[str, int], Plan[list[RetrievedDoc]]]]


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


def checked_answer(
    answer: str, query: str, docs: list[RetrievedDoc], rules: Sequence[AnswerRule] = (), quotes: bool = False
) -> Plan[str]:
    """A strategy's final answer. When the documents do not speak to the question and do
    not support the answer (:func:`documents_relevance`), :data:`NOT_ENOUGH_ANSWER` with a
    ``not_in_documents`` note. When it is unusable (``grounding.degenerate_reason``:
    empty, a loop, an echo of the prompt or the question, a refusal although the context
    covers the question, a copy of an instruction planted in a document, a key name, an
    identifier, a date the context does not hold), the source sentence that answers the
    question, quoted (:func:`quoted_answer`), else :data:`GENERATION_FAILED_ANSWER`, with
    the reason in the trace. With ``quotes`` (``StrategyConfig.quotes``), a usable answer
    gives way to that quote when the fitted choice check prefers it
    (:func:`~selfrag_core.signals.choice.quote_chosen`; an ``answer_quoted`` decision with
    both probabilities). Then the strategy's answer ``rules``
    (:mod:`~selfrag_core.signals.rules`; none by default) run in order: the first finding
    with a replacement replaces the answer (a ``rule_replaced`` note, e.g.
    :class:`~selfrag_core.comparison.ComparisonRule`'s "Erika Jayne: 1971 [1], against 1977
    for Marco Da Silva [2]."), the others are ``rule_flagged`` notes. :func:`answer_text`
    cleans it first. Past the query's deadline it is not checked: the fallback answer,
    with the QueryTimeoutError in the trace (reason ``query_timeout``)."""
    try:
        yield Deadline("checking the answer")
    except QueryTimeoutError as e:
        detail = {"reason": "query_timeout", "then": "fallback answer"}
        yield Note("answer_rejected", f"{type(e).__name__}: {e}", detail)
        return GENERATION_FAILED_ANSWER
    answer = answer_text(answer)
    relevance = documents_relevance(query, docs, answer)
    if relevance is not None:
        found: dict[str, Any] = {
            "relevance": round(relevance.probability, 4),
            "threshold": relevance.threshold,
        }
        yield Note("not_in_documents", "the documents found do not speak to the question", found)
        return NOT_ENOUGH_ANSWER
    texts = [d.text for d in docs]
    for rule in rules:
        finding = rule.check(query, answer, texts)
        if finding is None:
            continue
        flagged: dict[str, Any] = {"rule": finding.rule, "answer": answer[:200], **finding.detail}
        if finding.replacement is not None:
            yield Note("rule_replaced", finding.message, {**flagged, "then": finding.replacement})
            return finding.replacement
        yield Note("rule_flagged", finding.message, flagged)
    return (yield from usable_answer(answer, query, docs, quotes, GENERATION_FAILED_ANSWER))


def usable_answer(
    answer: str, query: str, docs: list[RetrievedDoc], quotes: bool, otherwise: str
) -> Plan[str]:
    """``answer`` when it is usable (``grounding.degenerate_reason``; with ``quotes``,
    weighed against the quote, :func:`weighed_quote`), else the source sentence that answers
    the question, quoted (:func:`quoted_answer`), else ``otherwise``; an ``answer_rejected``
    note with the reason when the answer is replaced."""
    reason = degenerate_reason(answer, query, context_text(docs))
    if reason is None:
        return (yield from weighed_quote(answer, query, docs)) if quotes else answer
    quote = quoted_answer(query, docs)
    if quote or otherwise != answer:
        detail = {"reason": reason, "answer": answer[:200], "then": "a quote" if quote else "fallback answer"}
        yield Note("answer_rejected", f"the answer is unusable: {reason}", detail)
    return quote or otherwise


def weighed_quote(answer: str, query: str, docs: list[RetrievedDoc]) -> Plan[str]:
    """``answer`` (usable), or the source sentence that speaks most to ``query``
    (:func:`quoted_answer`) when the fitted choice check prefers it
    (:func:`~selfrag_core.signals.choice.quote_chosen`): then an ``answer_quoted`` decision
    with both probabilities, and the quote with the yes or no ``answer`` opened with
    (:func:`kept_decision`). No LLM call."""
    quote = quoted_answer(query, docs)
    chosen = None if quote is None else quote_chosen(answer, quote, query, [d.text for d in docs])
    if quote is None or chosen is None:
        return answer
    weighed = {"answer": answer[:200], "model": round(chosen[0], 4), "quote": round(chosen[1], 4)}
    yield Note("answer_quoted", None, weighed, kind="decision")
    return kept_decision(answer, quote)


_OPENING_DECISION = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


def kept_decision(answer: str, quote: str) -> str:
    """``quote`` in the place of ``answer``, with the yes or no ``answer`` opens with kept
    in front ("No. “...” [2]"): a source's sentence says what the documents hold, and
    cannot say the yes or no a question of that kind asks for."""
    opening = _OPENING_DECISION.match(answer)
    return f"{opening.group(1).capitalize()}. {quote}" if opening else quote


@dataclass(frozen=True)
class Irrelevant:
    """The fitted relevance check's verdict on documents that do not speak to a question."""

    probability: float
    threshold: float


def documents_relevance(query: str, docs: list[RetrievedDoc], answer: str = "") -> Irrelevant | None:
    """Whether the retrieved ``docs`` fail to speak to ``query`` at all, by the fitted
    relevance check (:func:`~selfrag_core.signals.features.relevance_features`: the
    question's words in the passages; a backend's own scores, ranks or min-max scaled,
    cannot say "nothing relevant"): the check's probability and threshold when they do
    not, and the fitted support check does not hold ``answer`` supported by them either;
    else None (and for no documents: that is its own answer). Then every strategy answers
    that the documents do not say (``no_answer: "not_in_documents"``), not from the
    model's memory."""
    checks = shipped()
    if not docs or not checks.has("relevance"):
        return None
    check = checks.pick("relevance", semantic=False)
    texts = [d.text for d in docs]
    probability = check.probability(relevance_features(query, texts))
    if probability >= check.threshold:
        return None
    supported = verify_answer(answer, texts, question=query).probability if answer.strip() else None
    if supported is not None and supported >= checks.pick("support", semantic=False).threshold:
        return None
    return Irrelevant(probability, check.threshold)


#: the share of the question's words a source sentence must hold to be quoted as its answer
QUOTE_COVERAGE = 0.5


def quoted_answer(query: str, docs: list[RetrievedDoc]) -> str | None:
    """The source sentence that speaks most to ``query`` (the largest share of its words,
    :func:`~selfrag_core.grounding.question_coverage`; at least :data:`QUOTE_COVERAGE`),
    quoted with its source's marker (``"Honeybees dance to show the way." [1]``): what a
    strategy answers instead of the placeholder when the model's answer is unusable but
    a document holds one. None when no sentence does (or only a planted instruction). The
    document's title line is left out of the quote (:func:`_without_heading`)."""
    best, best_coverage = None, QUOTE_COVERAGE
    for number, doc in enumerate(docs, 1):
        for sentence in split_sentences(doc.text):
            if is_instruction(sentence):
                continue
            coverage = question_coverage(sentence, query, sentence)
            if coverage > best_coverage or (best is None and coverage >= best_coverage):
                best, best_coverage = f"\u201c{_without_heading(sentence, doc)}\u201d [{number}]", coverage
    return best


def _without_heading(sentence: str, doc: RetrievedDoc) -> str:
    """``sentence`` without the title line of ``doc`` it begins with: a passage stored as
    "Foo Fighters\nFoo Fighters is an American rock band ..." reads as one sentence, which
    a quote would repeat the name in. A title line is the document's first line when it is
    its ``title`` metadata or the next line begins with it."""
    first, _, rest = doc.text.strip().partition("\n")
    heading = " ".join(first.split())
    is_title = heading == doc.metadata.get("title") or rest.lstrip().startswith(first.strip())
    if rest.strip() and heading and is_title and sentence.startswith(heading + " "):
        return sentence[len(heading) + 1 :]
    return sentence


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
    return (yield from checked_answer(reply.strip(), query, docs, strategy.rules, strategy.quotes))


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
    #: overrides them by name, see for_call); None: a strategy of yours without any
    config: StrategyConfig | None = None
    #: the default conversation of calls whose context carries none (SelfHealingRAG's);
    #: None: no history. A service clears it on the copy a request runs (a conversation
    #: belongs to its caller)
    memory: ConversationMemory | None = None
    #: whether a query's ``context["memory"]`` (a ConversationMemory) reaches the prompts:
    #: the OpenAI endpoint passes a chat's earlier turns only to such a strategy
    conversational: ClassVar[bool] = False
    #: the LLM calls a stream shows as steps, ``{purpose: step kind}`` (a kind of
    #: :data:`~selfrag_core.runner.STEP_KINDS`; HyDERAG's ``{"hyde_document": "hypothesis"}``):
    #: :func:`~selfrag_core.runner.step_of` knows those of every strategy class defined
    step_calls: ClassVar[Mapping[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = sorted(set(cls.step_calls.values()) - set(STEP_KINDS))
        if unknown:
            raise ValueError(f"{cls.__name__}.step_calls names {unknown}, not kinds of {STEP_KINDS}")
        STEP_CALLS.update(cls.step_calls)

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
        config = self.config
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

    @property
    def verifier(self) -> Verifier | None:
        """What decides whether this strategy's answers are supported (its citations, its
        grounding, its choice among drafts): its config's ``verifier``; None, the
        default, is the LLM-free :class:`~selfrag_core.verify.LexicalVerifier` (and a
        strategy of yours without a config)."""
        return getattr(self.config, "verifier", None)

    @property
    def rules(self) -> tuple[AnswerRule, ...]:
        """The answer rules this strategy's final answer check runs: its config's
        ``rules`` (none by default, :mod:`~selfrag_core.signals.rules`)."""
        return tuple(getattr(self.config, "rules", ()))

    @property
    def quotes(self) -> bool:
        """Whether the final answer check weighs a quote beside the model's answer: its
        config's ``quotes``."""
        return bool(getattr(self.config, "quotes", False))

    def ranking(self) -> Ranking | None:
        """How this strategy ranks documents for a question without answering (a
        retrieval-only ``selfrag eval`` run, its contender's ``rank``): ``"search"`` (one
        search of the backend, no LLM call: PlainRAG), a plan ``ranking(question, k)`` of
        the ``k`` documents it would answer from (HyDERAG's fused ranking), or None, the
        default: it cannot, and such a run leaves it out."""
        return None

    def ranking_calls(self) -> float:
        """The LLM calls one :meth:`ranking` costs (the dry run's estimate): none by default."""
        return 0.0

    def ranking_prompt(self, query: str) -> str:
        """The prompt each of the :meth:`ranking_calls` sends for ``query`` (the dry run
        counts its tokens): "" by default."""
        return ""

    def estimated_calls(self, query: str) -> float:
        """A rough prior of the LLM calls this strategy makes on ``query``, from its settings:
        AdaptiveRAG's cost model (:func:`~selfrag_core.strategies.adaptive.estimate_calls`;
        a fitted router replaces it with the calls measured) and ``selfrag eval --dry-run``.
        2 by default."""
        return 2.0

    def get_stats(self) -> dict[str, Any]:
        """What the service's ``/stats`` shows of the strategy beside its class (SelfIRAG:
        its settings); none by default."""
        return {}

    def finish(self, result: R, run: Run) -> R:
        """The last step of every run: the result gets the run's trace and wall time, and
        its citations checked by the strategy's :attr:`verifier`
        (:func:`~selfrag_core.runner.finish_trace`). Subclasses extend it (SelfHealingRAG
        fills each attempt's usage)."""
        return finish_trace(result, run, verifier=self.verifier, citing=cite)

    def add_document(self, text: str, metadata: dict[str, Any] | None = None) -> Any:
        """Pass-through to the backend's ``add_document`` (metadata defaults to {})."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text must be a non-empty string")
        adder = getattr(getattr(self, "rag_system", None), "add_document", None)
        if adder is None:
            name = type(getattr(self, "rag_system", None)).__name__
            raise TypeError(f"{name} has no add_document(text, metadata); add documents to the backend")
        return adder(text, metadata if metadata is not None else {})
