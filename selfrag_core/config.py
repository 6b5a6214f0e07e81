"""Configuration: frozen dataclasses validated at construction.

Every strategy takes one config (:class:`StrategyConfig`: ``PlainRAGConfig``,
``SelfRAGConfig``, ``HyDERAGConfig``, ``RecursiveRAGConfig``, ``SelfHealingRAGConfig``,
``AdaptiveRAGConfig``) with one name per setting: ``top_k`` is the documents retrieved
per search, ``confidence_threshold`` the score at which an answer is accepted,
``llm_retries`` the retries of one LLM call. A query's ``context`` overrides any of them
for that call under the same names (``strategy.query(q, {"top_k": 3})``), and
``Config.for_profile(profile)`` sizes them for a model (:mod:`selfrag_core.profiles`).
How a query runs (concurrency, budget, timeouts) is :class:`ExecutionConfig`, shared by
every strategy.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

from selfrag_core.errors import ConfigurationError
from selfrag_core.profiles import ModelProfile
from selfrag_core.signals.rules import AnswerRule, check_rules
from selfrag_core.validation import check_int, check_positive_or_none, check_unit, check_verifier

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from selfrag_core.verify import Verifier

C = TypeVar("C", bound="StrategyConfig")
#: any frozen settings dataclass (a strategy's config, ``EvalSettings``)
D = TypeVar("D", bound="DataclassInstance")

DEFAULT_COMPLEXITY_KEYWORDS: tuple[str, ...] = (
    # Arabic
    "و", "أو", "ثم", "بعد", "قبل", "أسباب", "نتائج", "مقارنة", "الفرق", "العلاقة",
    "التأثير", "كيف", "لماذا", "متى", "أين",
    # English
    "and", "or", "causes", "effects", "compare", "difference", "relationship", "impact",
    "how", "why", "when",
)  # fmt: skip


@dataclass(frozen=True)
class ExecutionConfig:
    """How a query runs, shared by every strategy (and down a composed tree).

    max_concurrency: independent LLM calls and retrievals of one query that may run
        at once (hypothetical documents, sub-questions, their retrievals); the default, 8,
        sends HyDE's passages out in one round up to 8 of them.
    max_llm_calls: cap on LLM calls (attempts included) per query; None for no cap.
        Calls past the cap fail with BudgetExceededError and the strategy's fallback
        applies.
    llm_timeout: seconds one LLM attempt may take (default 60; None for no limit); a
        timed-out attempt counts as a failed attempt and is retried per policy. A sync
        LLM's abandoned call runs on in a daemon thread of the library's own, so it
        never holds up the interpreter's exit nor another query's threads.
    retrieval_timeout: seconds one retrieval may take (default 30; None for no limit);
        a timed-out retrieval fails with ``RetrievalTimeoutError`` and the strategy's
        retrieval fallback applies.
    query_timeout: seconds a whole query may take; past it, calls fail fast and the
        fallbacks produce the result. Every LLM attempt, retrieval, wait for the
        concurrency limit and retry back-off is bounded by what is left of it.
    retry_initial_wait / retry_max_wait: exponential back-off between attempts.
    max_reply_chars: characters of one LLM reply the library processes (default
        100,000, about 25,000 tokens: far beyond a real answer or judgement, and what
        the JSON parser reads); the rest of a longer reply is cut off, with a
        ``reply_truncated`` fallback note (the reply's length and what was kept) in the
        trace and the log. It bounds the work after each call (parsing, grounding,
        citations) whatever the model sends.
    misconfiguration: what a programming or configuration error of the LLM or the
        backend does (a ``TypeError``/``AttributeError`` from it, rejected credentials,
        a model that does not exist; see ``errors.misconfiguration_hint``): "raise"
        (default) stops the query with a ``ConfigurationError`` naming the component
        and the fix; "fallback" treats it as any other failure (fallback answer, the
        error in the trace).
    record_content: keep each LLM call's prompt and reply and the retrieved documents'
        text in the trace's events (``detail["prompt"]``, ``detail["reply"]``, the
        documents' ``text``), for OpenTelemetry spans that capture content
        (``selfrag_core.otel``). Off by default: they are large and may hold personal data.
    sleep / async_sleep: injectable for tests (instant retries).
    knobs: what the user sets a limit by in the interface in use, by field name (the CLI
        sets ``{"query_timeout": "--timeout", ...}``); timeout and budget messages name it,
        and ``ExecutionConfig.<field>`` for a limit it does not name.
    """

    max_concurrency: int = 8
    max_llm_calls: int | None = None
    llm_timeout: float | None = 60.0
    query_timeout: float | None = None
    retry_initial_wait: float = 0.5
    retry_max_wait: float = 8.0
    retrieval_timeout: float | None = 30.0
    misconfiguration: str = "raise"
    max_reply_chars: int = 100_000
    record_content: bool = False
    sleep: Callable[[float], None] | None = field(default=None, compare=False)
    async_sleep: Callable[[float], Awaitable[None]] | None = field(default=None, compare=False)
    knobs: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_int("max_concurrency", self.max_concurrency, 1)
        if self.max_llm_calls is not None:
            check_int("max_llm_calls", self.max_llm_calls, 1)
        check_positive_or_none("llm_timeout", self.llm_timeout)
        check_positive_or_none("query_timeout", self.query_timeout)
        check_positive_or_none("retrieval_timeout", self.retrieval_timeout)
        check_int("max_reply_chars", self.max_reply_chars, 1)
        if not isinstance(self.record_content, bool):
            raise ConfigurationError(f"record_content must be True or False, got {self.record_content!r}")
        if self.misconfiguration not in ("raise", "fallback"):
            raise ConfigurationError(
                f"misconfiguration must be 'raise' or 'fallback', got {self.misconfiguration!r}"
            )
        if self.retry_initial_wait < 0 or self.retry_max_wait < 0:
            raise ConfigurationError("retry waits must be >= 0")
        unknown = sorted(set(self.knobs) - {f.name for f in fields(self)})
        if unknown:
            raise ConfigurationError(f"knobs names no field {', '.join(unknown)} of ExecutionConfig")


@dataclass(frozen=True)
class GroundingConfig:
    """LLM-free grounding checks applied to every SelfIRAG evaluation.

    enabled: when False, best-step selection uses the judge's confidence alone (as the
        reference specification does).
    min_token_support: the verifier's score at which an answer counts as supported (the
        default verifier's threshold; the name is the specification's).
    verifier: what decides support (``selfrag_core.verify.Verifier``: ``verify(sentences,
        passages, question)``), e.g. a ``CrossEncoderVerifier`` over an NLI model; None:
        the LLM-free ``LexicalVerifier``. Used for the grounding and the citations. The
        same as ``SelfRAGConfig(verifier=...)``, the setting every strategy's config has
        (:class:`StrategyConfig`); when both are set they must be the same object.
    """

    enabled: bool = True
    min_token_support: float = 0.5
    verifier: Verifier | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_unit("min_token_support", self.min_token_support)
        check_verifier(self.verifier)


#: the specification's default of the documents retrieved per search
DEFAULT_TOP_K = 5
#: passages per search in a small context window (five passages and the instructions would
#: crowd out the answer, or lose the prompt's middle)
SMALL_TOP_K = 3
#: SelfHealingRAG's instruction for answering from a backend attempt (the specification's)
DEFAULT_SYSTEM_PROMPT = (
    "Answer using only the provided context. If the context does not contain the answer, say so."
)


@dataclass(frozen=True)
class StrategyConfig:
    """What every strategy's config can do (the subclasses hold the other fields).

    verifier: what decides whether an answer is supported by the documents, wherever the
        strategy decides it: its citations, its grounding, SelfIRAG's
        ``stop_when_supported``, SelfHealingRAG's evidence, DraftsRAG's choice of draft,
        AdaptiveRAG's support signal (a :class:`~selfrag_core.verify.Verifier`:
        ``verify(sentences, passages, question)`` and a ``threshold``; e.g. a
        ``CrossEncoderVerifier`` over an NLI model you have loaded). None (the default):
        the LLM-free :class:`~selfrag_core.verify.LexicalVerifier`. A composite strategy
        that builds its own children (AdaptiveRAG's default candidates,
        ``presets.build_strategy``) gives them its verifier. Keyword-only; an object, so it
        takes no part in a config's equality, hash or repr.
    rules: the hand-written answer rules the final answer check runs
        (:mod:`~selfrag_core.signals.rules`; e.g. ``(ComparisonRule(),)``, which replaces
        a pick between two alternatives that the documents' dates or numbers contradict).
        None by default: no rule changes or flags an answer unless you name it. Composite
        strategies give them to the children they build, as the verifier. Keyword-only.
    quotes: whether the final answer check weighs the source sentence that speaks most to
        the question (quoted, ``“...” [n]``) beside the model's answer, and answers
        with it when the fitted choice check (:func:`~selfrag_core.signals.choice.quote_chosen`)
        prefers it (an ``answer_quoted`` decision in the trace). No LLM call. False by
        default (a capable model's answer is left as it is); ``for_profile`` turns it on
        for a model that cannot keep to JSON (:data:`~selfrag_core.profiles.SMALL_LOCAL`,
        the embedded models): with such a model the sources' own sentence is often the
        better answer. Keyword-only.

    ``replace(**changes)``: a copy with those fields changed, validated (an unknown name
    raises ConfigurationError listing the known ones). ``with_overrides(context)``: the
    copy a query's ``context`` makes: its entries that name a field (None entries
    ignored). ``for_profile(profile, **changes)``: the sizes that fit a model
    (:class:`~selfrag_core.profiles.ModelProfile`), then ``changes``.
    """

    verifier: Verifier | None = field(default=None, kw_only=True, compare=False, repr=False)
    rules: tuple[AnswerRule, ...] = field(default=(), kw_only=True, compare=False, repr=False)
    quotes: bool = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        check_verifier(self.verifier)
        if not isinstance(self.quotes, bool):
            raise TypeError(f"quotes must be True or False, got {self.quotes!r}")
        object.__setattr__(self, "rules", check_rules(self.rules))

    @classmethod
    def names(cls) -> frozenset[str]:
        """The settings' names (the fields)."""
        return frozenset(f.name for f in fields(cls))

    def replace(self: C, **changes: Any) -> C:
        return replaced(self, **changes)

    def with_overrides(self: C, context: Mapping[str, Any] | None) -> C:
        """This config as one query sees it: ``context``'s entries that name a setting
        replace it (validated; None entries are ignored)."""
        changes = {k: v for k, v in (context or {}).items() if k in self.names() and v is not None}
        if all(getattr(self, k) is v for k, v in changes.items()):
            return self  # nothing to change (a config already as the call asks)
        return self.replace(**changes)

    @classmethod
    def for_profile(cls: type[C], profile: ModelProfile, **changes: Any) -> C:
        """The config sized for ``profile`` (see each config's ``_sizes``), then ``changes``;
        the sizes that follow ``top_k`` follow a ``top_k`` given in ``changes``."""
        if not isinstance(profile, ModelProfile):
            raise TypeError(f"profile must be a ModelProfile, got {type(profile).__name__}")
        top_k = changes.get("top_k")
        # a model that cannot keep to JSON is a weak generator: a quote may answer better
        sizes = {"quotes": not profile.follows_json}
        sizes.update(cls._sizes(profile, profile_top_k(profile) if top_k is None else top_k))
        return cls().replace(**{**sizes, **{k: v for k, v in changes.items() if v is not None}})

    @classmethod
    def _sizes(cls, profile: ModelProfile, top_k: int) -> dict[str, Any]:
        return {"top_k": top_k}


def profile_top_k(profile: ModelProfile) -> int:
    """Passages retrieved per search for ``profile``: :data:`SMALL_TOP_K` in a small context
    window, else :data:`DEFAULT_TOP_K` (the specification's)."""
    return SMALL_TOP_K if profile.small_context else DEFAULT_TOP_K


def replaced(settings: D, **changes: Any) -> D:
    """A copy of the frozen dataclass ``settings`` with ``changes``, validated (its
    ``__post_init__`` runs); an unknown name raises ConfigurationError listing the known ones."""
    names = {f.name for f in fields(settings)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise ConfigurationError(
            f"{type(settings).__name__} has no setting {', '.join(unknown)}; "
            f"its settings are {', '.join(sorted(names))}"
        )
    return dataclasses.replace(settings, **changes) if changes else settings


def config_from(
    kind: type[D],
    config: D | None,
    owner: str,
    given: Mapping[str, Any],
    *,
    renamed: Mapping[str, str] | None = None,
    deprecated: Collection[str] = (),
    parameter: str = "config",
    keep_none: bool = False,
    strict: bool = False,
) -> D:
    """A strategy's config: ``config`` (default ``kind()``) with the keyword arguments
    ``given`` to ``owner``'s constructor (None: not given) applied on top, each under its
    canonical name (``renamed``: the specification's name -> the field). The names in
    ``deprecated`` warn (DeprecationWarning): pass ``config=`` instead.

    The same for any frozen settings dataclass ``kind`` taken as ``parameter`` (the
    warning's "pass settings=EvalSettings(k=...)"). ``keep_none``: a None in ``given`` is
    a value, not a keyword left out (``given`` then holds only the keywords passed).
    ``strict``: a keyword whose value differs from a field ``config`` sets (one not at
    its default) is a ConfigurationError instead of replacing it."""
    if config is not None and not isinstance(config, kind):
        raise TypeError(f"{parameter} must be a {kind.__name__}, got {type(config).__name__}")
    renamed = renamed or {}
    changes: dict[str, Any] = {}
    for name, value in given.items():
        if value is None and not keep_none:
            continue
        canonical = renamed.get(name, name)
        if name in deprecated:
            warnings.warn(
                f"{owner}({name}=...) is deprecated; pass {parameter}={kind.__name__}({canonical}=...)",
                DeprecationWarning,
                stacklevel=3,
            )
        changes[canonical] = value
    settings = replaced(config or kind(), **changes)  # an unknown name or a bad value raises here
    if strict and config is not None:
        default = kind()
        for name, value in given.items():
            canonical = renamed.get(name, name)
            current = getattr(config, canonical)
            if canonical in changes and current != getattr(default, canonical) and value != current:
                raise ConfigurationError(
                    f"{owner}({name}={value!r}) conflicts with {parameter}="
                    f"{kind.__name__}({canonical}={current!r}); pass one of them"
                )
    return settings


@dataclass(frozen=True)
class _OneAnswerConfig(StrategyConfig):
    """``top_k`` documents retrieved, ``llm_retries`` per LLM call: what one retrieval and
    one answer need."""

    top_k: int = DEFAULT_TOP_K
    llm_retries: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("top_k", self.top_k, 1)
        check_int("llm_retries", self.llm_retries, 0)


@dataclass(frozen=True)
class PlainRAGConfig(_OneAnswerConfig):
    """PlainRAG's settings.

    top_k: documents retrieved. llm_retries: retries of the LLM call.
    max_context_chars: characters of the prompt's documents (their fenced blocks), the
        documents that fit whole then as much of the next as fits; None: no limit.
    allow_llm_on_empty: when retrieval finds nothing, ask the LLM with an empty context
        (False: answer "There is not enough information." without a call).
    check_answer: the reply is checked and cleaned (an unusable one gives way to a quote
        of the documents or the fallback answer); False: the reply as the model wrote it.
    raise_errors: a failed retrieval or LLM call raises its typed error
        (``RetrievalError``, ``LLMCallError``, ``LLMTimeoutError``, ``BudgetExceededError``,
        ``QueryTimeoutError``; the backend's or model's own error as ``__cause__``) instead
        of the fallback answer. ``RAG.query`` runs PlainRAG with ``check_answer=False,
        raise_errors=True``.
    drafts: beside the answer over all the documents, a draft over each of the first
        ``drafts`` documents alone, in the same round; the verifier keeps the best
        (:mod:`selfrag_core.strategies.drafts`). 0: one answer, one call.
    """

    max_context_chars: int | None = None
    allow_llm_on_empty: bool = False
    check_answer: bool = True
    raise_errors: bool = False
    drafts: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("drafts", self.drafts, 0)
        if self.max_context_chars is not None:
            check_int("max_context_chars", self.max_context_chars, 0)
        for flag in ("allow_llm_on_empty", "check_answer", "raise_errors"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(f"{flag} must be True or False, got {getattr(self, flag)!r}")


@dataclass(frozen=True)
class DraftsRAGConfig(PlainRAGConfig):
    """``drafts``' settings: PlainRAG's, with two drafts over single documents for a model
    that does not follow JSON (a small one answers better from the one passage that holds
    the answer), none for one that does (it reads several passages well: plain then)."""

    drafts: int = 2

    @classmethod
    def _sizes(cls, profile: ModelProfile, top_k: int) -> dict[str, Any]:
        return {"top_k": top_k, "drafts": 0 if profile.follows_json else 2}


@dataclass(frozen=True)
class AdaptiveRAGConfig(_OneAnswerConfig):
    """AdaptiveRAG's settings for its plain first answer (its candidates have their own):
    ``top_k`` documents retrieved, ``llm_retries`` per LLM call."""


@dataclass(frozen=True)
class HyDERAGConfig(StrategyConfig):
    """HyDERAG's settings (the specification's names and defaults).

    num_hypothetical_docs: passages the LLM writes, all in one round (up to
        ``ExecutionConfig.max_concurrency``). use_original_query: the question searches
        too, and leads each passage's search. top_k: documents retrieved per search.
    max_final_docs: documents of the fused ranking kept (the answer prompt shows at most
        five of them). llm_retries: retries of one LLM call.
    """

    num_hypothetical_docs: int = 3
    use_original_query: bool = True
    top_k: int = DEFAULT_TOP_K
    max_final_docs: int = 10
    llm_retries: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("num_hypothetical_docs", self.num_hypothetical_docs, 1)
        object.__setattr__(self, "use_original_query", bool(self.use_original_query))
        check_int("top_k", self.top_k, 1)
        check_int("max_final_docs", self.max_final_docs, 1)
        check_int("llm_retries", self.llm_retries, 0)

    @classmethod
    def _sizes(cls, profile: ModelProfile, top_k: int) -> dict[str, Any]:
        """One passage when decoding is deterministic (greedy decoding gives identical
        passages for identical prompts: a second costs a call and adds nothing), else 3; in
        a small context window no more fused passages than one search returns."""
        sizes: dict[str, Any] = {"top_k": top_k, "num_hypothetical_docs": 1 if profile.deterministic else 3}
        if profile.small_context:
            sizes["max_final_docs"] = top_k
        return sizes


@dataclass(frozen=True)
class SelfHealingRAGConfig(StrategyConfig):
    """SelfHealingRAG's settings.

    confidence_threshold: the score (the metric's, blended with the evidence) at which an
        attempt's answer is accepted (the specification's ``quality_threshold``, a
        deprecated keyword of ``SelfHealingRAG``).
    max_retries: strategies tried after the first. system_prompt: the instruction of a
        backend attempt's answer. top_k: documents a backend attempt retrieves (the
        specification's ``retrieval_top_k``, deprecated too). evidence_weight: the weight of the LLM-free
        evidence in the score (0: the metric alone, as the specification scores).
    """

    confidence_threshold: float = 0.75
    max_retries: int = 2
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    top_k: int = DEFAULT_TOP_K
    evidence_weight: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_unit("confidence_threshold", self.confidence_threshold)
        check_int("max_retries", self.max_retries, 0)
        if not isinstance(self.system_prompt, str):
            raise TypeError("system_prompt must be a str")
        check_int("top_k", self.top_k, 1)
        check_unit("evidence_weight", self.evidence_weight)

    @classmethod
    def _sizes(cls, profile: ModelProfile, top_k: int) -> dict[str, Any]:
        """One retry for a model that does not follow JSON (its faithfulness judgements are
        rough, so more retries mostly cost time), else 2."""
        return {"top_k": top_k, "max_retries": 2 if profile.follows_json else 1}


@dataclass(frozen=True)
class SelfRAGConfig(StrategyConfig):
    """SelfIRAG's settings (the specification's, plus ``grounding`` and
    ``stop_when_supported``).

    stop_when_supported: stop at the first answer whose sentences are mostly supported
        by the retrieved documents, without asking the judge (one LLM call): for a model
        whose judge cannot be trusted to improve on a supported answer (the small
        model profile sets it). False keeps the judge in charge, as specified.
    verifier: as every config's (:class:`StrategyConfig`); ``grounding.verifier``, the
        older place of the same setting, still sets it: when it is set, it is this
        config's ``verifier``, and a ``verifier`` that is another object is a
        ConfigurationError.
    """

    max_refinement_iterations: int = 3
    confidence_threshold: float = 0.80
    enable_answer_refinement: bool = True
    enable_retrieval_refinement: bool = True
    llm_retries: int = 2
    fast_mode: bool = True
    skip_refinement_on_high_confidence: bool = True
    top_k: int = 5
    grounding: GroundingConfig = field(default_factory=GroundingConfig)
    stop_when_supported: bool = False
    #: answer the parts of a question of several parts that the chosen answer leaves out
    #: (one more retrieval and answer per part, in one parallel round; none when it covers all)
    complete_parts: bool = True
    #: two-step: a draft over each of the first ``drafts`` documents alone, written after the
    #: first answer and only when the verifier doubts it (none when no draft could beat it);
    #: the verifier keeps the best (:mod:`selfrag_core.strategies.drafts`)
    drafts: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("drafts", self.drafts, 0)
        check_int("max_refinement_iterations", self.max_refinement_iterations, 1)
        check_unit("confidence_threshold", self.confidence_threshold)
        check_int("llm_retries", self.llm_retries, 0)
        check_int("top_k", self.top_k, 1)
        grounded = getattr(self.grounding, "verifier", None)
        if grounded is not None:
            if self.verifier is not None and self.verifier is not grounded:
                raise ConfigurationError(
                    f"SelfRAGConfig(verifier={type(self.verifier).__name__}(...)) and "
                    f"grounding=GroundingConfig(verifier={type(grounded).__name__}(...)) are two different "
                    "verifiers; set one of them (verifier=, the setting every strategy's config has)"
                )
            object.__setattr__(self, "verifier", grounded)

    @classmethod
    def _sizes(cls, profile: ModelProfile, top_k: int) -> dict[str, Any]:
        """For a model that does not follow JSON: two-step (it answers worse inside a JSON
        object), two refinement rounds (its critiques are rough), a mostly supported
        first answer ends the loop without the judge (it walks the judge's schema instead
        of judging), and two drafts over single documents beside the first answer (it
        answers better from the one passage that holds the answer: on 30 XQuAD tuning
        questions gold in the answer 0.23 -> 0.40)."""
        json = profile.follows_json
        return {
            "top_k": top_k,
            "fast_mode": json,
            "max_refinement_iterations": 3 if json else 2,
            "stop_when_supported": not json,
            "drafts": 0 if json else 2,
        }


@dataclass(frozen=True)
class RecursiveRAGConfig(StrategyConfig):
    max_depth: int = 3
    max_sub_questions: int = 4
    min_query_length: int = 40
    complexity_keywords: tuple[str, ...] = DEFAULT_COMPLEXITY_KEYWORDS
    llm_retries: int = 2
    top_k: int = 5
    #: how a question is split: "llm" (the specification's: the LLM splits every complex
    #: question), "rules" (only a question of several parts, by rule, without a call: for
    #: a model that cannot write JSON) or "auto" (by rule when that finds parts, else by
    #: the LLM)
    decomposition: str = "llm"
    #: whether the sub-answers are merged by the LLM (else joined, with their citations)
    merge: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.decomposition not in ("auto", "rules", "llm"):
            raise ConfigurationError(
                f"decomposition must be 'auto', 'rules' or 'llm', got {self.decomposition!r}"
            )
        if not isinstance(self.merge, bool):
            raise TypeError(f"merge must be True or False, got {self.merge!r}")
        check_int("max_depth", self.max_depth, 0)
        check_int("max_sub_questions", self.max_sub_questions, 1)
        check_int("min_query_length", self.min_query_length, 0)
        check_int("llm_retries", self.llm_retries, 0)
        check_int("top_k", self.top_k, 1)
        if isinstance(self.complexity_keywords, str):
            raise ConfigurationError("complexity_keywords must be a list of words, not a string")
        object.__setattr__(self, "complexity_keywords", tuple(self.complexity_keywords))

    @classmethod
    def _sizes(cls, profile: ModelProfile, top_k: int) -> dict[str, Any]:
        """A model that does not follow JSON writes junk sub-question lists and its merge
        loses parts: it splits by rule only, one level deep, and joins the sub-answers."""
        if profile.follows_json:
            return {"top_k": top_k}
        return {"top_k": top_k, "max_depth": 1, "decomposition": "rules", "merge": False}
