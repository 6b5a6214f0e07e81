"""AdaptiveRAG: per question, the cheapest strategy expected to do as well as the best.

Each question starts as a plain retrieve-and-answer. Before answering, and again after,
the router reads signals that cost no LLM call (:func:`route_signals`: the question's
shape, the retrieval scores and their margin, then the first answer's support by the
documents and its coverage of the question) and either stops or hands the question to
the candidate strategy expected to gain most for its cost. Every decision, with its
signals, the expected gain and calls of each candidate and the reason, is a ``route``
note in the trace (``kind="decision"``).

Two routers:

* :class:`RuleRouter` (the default): decompose a question of several parts (a
  ``RecursiveRAG`` candidate, before any answer); escalate an answer that is unsupported
  by the documents, a refusal or degenerate, or that leaves part of the question
  uncovered (the first affordable of ``SelfHealingRAG``, ``SelfIRAG``, ``HyDERAG``, in
  that order: the order of their measured gains); never escalate when retrieval found
  nothing. Its gains are unknown (None): rules, not measurements.
* :class:`FittedRouter`: learned from your own ``selfrag eval`` run (``selfrag eval ...
  --fit-router router.json``, :mod:`selfrag_core.evaluation.router`): per candidate and
  stage, two small logistic regressions over the signals (the chance that it answers
  better than plain, and worse), the mean gain and loss when it does, and its mean LLM
  calls. The expected gain is ``p_better * gain - p_worse * loss``; a candidate is chosen
  when its gain exceeds ``min_gain_per_call`` for each extra call it costs (before the
  answer, only when it is more likely than not to answer better). Loaded from JSON only,
  validated (:func:`load_router`).

The budget knob, ``call_budget``: the most LLM calls a question is expected to cost. A
candidate whose expected calls exceed it is never chosen, and the query's LLM-call
budget (``ExecutionConfig.max_llm_calls``) is capped at its ceiling, so the engine
enforces it too.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from selfrag_core.comparison import comparison
from selfrag_core.config import AdaptiveRAGConfig, ExecutionConfig, SelfRAGConfig, config_from
from selfrag_core.engine import Note, Plan, without_streaming
from selfrag_core.errors import ConfigurationError, RAGSystemError
from selfrag_core.grounding import assess, content_stems, is_refusal, question_coverage
from selfrag_core.parsing import load_json
from selfrag_core.prompts import Prompts
from selfrag_core.protocols import BackendLike, LLMLike
from selfrag_core.questions import split_question
from selfrag_core.signals.rules import AnswerRule
from selfrag_core.strategies.base import (
    GENERATION_FAILED_ANSWER,
    NOT_ENOUGH_ANSWER,
    PART_COVERAGE,
    Strategy,
    checked_answer,
    context_text,
    grounded_reply,
    missing_parts,
    retrieval_options,
    retrieve_or_empty,
)
from selfrag_core.types import Answer, RetrievedDoc

if TYPE_CHECKING:
    from selfrag_core.verify import Verifier

#: the two moments a question is routed: after retrieval (before any LLM call), after the first answer
BEFORE_ANSWER, AFTER_ANSWER = "before_answer", "after_answer"
STAGES = (BEFORE_ANSWER, AFTER_ANSWER)
#: the signals known before any answer: the question's shape and the retrieval
QUESTION_SIGNALS = (
    "question_words", "clauses", "parts", "multi_part", "comparison", "dated_comparison", "entities",
    "retrieved", "top_score", "score_margin", "context_coverage",
)  # fmt: skip
#: the signals of the first answer, known after it
ANSWER_SIGNALS = (
    "answer_words", "answer_supported", "support_score", "answer_degenerate", "answer_refusal",
    "answer_coverage", "missing_parts",
)  # fmt: skip
#: every signal, in the order the fitted models read them
SIGNALS = QUESTION_SIGNALS + ANSWER_SIGNALS
#: the version of a router file's JSON shape
ROUTER_SCHEMA = "selfrag.router/1"
#: the fitted router's default: the gain (in the fitted metric) an extra LLM call must buy
MIN_GAIN_PER_CALL = 0.005
#: the answers that say nothing (no documents, no usable answer)
_EMPTY_ANSWERS = frozenset({"", GENERATION_FAILED_ANSWER, NOT_ENOUGH_ANSWER})

_COMPARISON = re.compile(
    r"\b(?:compare[sd]?|comparison|differ(?:s|ence|ent)?|versus|vs|both|same|either|neither|than|"
    r"older|younger|earlier|later|longer|shorter|larger|smaller|bigger|higher|lower|more|less|"
    r"first)\b",
    re.IGNORECASE,
)
_WHICH_OR = re.compile(r"\bwhich\b.*\bor\b", re.IGNORECASE)
_CLAUSE = re.compile(r"[,;،؛]|\b(?:and|or|but|while|whereas|although|because|which|who|whose|that)\b", re.I)
_TOKEN = re.compile(r"[^\W_][\w'’.-]*", re.UNICODE)


# ----------------------------------------------------------------------------- signals


def _entities(question: str) -> int:
    """Runs of capitalised words after the first word (names, titles): "Were Scott
    Derrickson and Ed Wood of the same nationality?" has two."""
    runs, inside = 0, False
    for i, token in enumerate(_TOKEN.findall(question)):
        capital = i > 0 and token[:1].isupper()
        if capital and not inside:
            runs += 1
        inside = capital
    return runs


def _similarities(docs: Sequence[RetrievedDoc]) -> list[float]:
    return [s for s in (d.similarity for d in docs) if s is not None and math.isfinite(s)]


def route_signals(
    question: str,
    docs: Sequence[RetrievedDoc],
    answer: str | None = None,
    *,
    verifier: Verifier | None = None,
) -> dict[str, float]:
    """The signals a router reads, none of which costs an LLM call: the question's shape
    (``question_words``, ``clauses``, ``parts`` and ``multi_part`` by
    :func:`~selfrag_core.questions.split_question`, ``comparison`` wording, ``entities``),
    the retrieval (``retrieved`` documents, the ``top_score`` and the ``score_margin``
    between the first two similarities, 0 where the backend gives none, and the share of
    the question's content words the documents hold, ``context_coverage``) and, with
    ``answer``, the first answer's (``answer_words``; ``answer_supported`` and
    ``support_score`` by ``verifier``, :func:`~selfrag_core.grounding.assess`, None: the
    default ``LexicalVerifier``;
    ``answer_degenerate``; ``answer_refusal``, also for no answer; ``answer_coverage`` of
    the question, :func:`~selfrag_core.grounding.question_coverage`; and the
    ``missing_parts`` of a question of several parts that it leaves out)."""
    parts = split_question(question)
    context = context_text(list(docs))
    scores = sorted(_similarities(docs), reverse=True)
    asked = content_stems(question)
    signals = {
        "question_words": float(len(question.split())),
        "clauses": float(1 + len(_CLAUSE.findall(question))),
        "parts": float(len(parts)),
        "multi_part": float(len(parts) > 1),
        "comparison": float(bool(_COMPARISON.search(question) or _WHICH_OR.search(question))),
        # "Who was born first, A or B?": RecursiveRAG reads both alternatives' dates
        "dated_comparison": float(comparison(question) is not None),
        "entities": float(_entities(question)),
        "retrieved": float(len(docs)),
        "top_score": scores[0] if scores else 0.0,
        "score_margin": scores[0] - scores[1] if len(scores) > 1 else 0.0,
        "context_coverage": len(asked & content_stems(context)) / len(asked) if asked else 1.0,
    }
    if answer is None:
        return signals
    text = answer.strip()
    empty = text in _EMPTY_ANSWERS
    passages = [d.text for d in docs]
    grounding = None if empty else assess(text, question, context, passages=passages, verifier=verifier)
    degenerate = grounding is None or grounding.degenerate is not None
    signals.update(
        answer_words=float(len(text.split())),
        answer_supported=float(grounding is not None and grounding.supported),
        support_score=0.0 if degenerate or grounding is None else float(grounding.support_score or 0.0),
        answer_degenerate=float(degenerate),
        answer_refusal=float(empty or is_refusal(text)),
        answer_coverage=0.0 if empty else question_coverage(text, question, context),
        missing_parts=float(len(missing_parts(question, text, list(docs))))
        if not empty
        else float(len(parts)),
    )
    return signals


def continues_answers(strategy: Any) -> bool:
    """Whether ``strategy`` (or a strategy class) can go on from a plain answer already
    written (``continue_answer(query, docs, first)``: PlainRAG, DraftsRAG)."""
    return callable(getattr(strategy, "continue_answer", None))


def estimate_calls(strategy: Any, question: str) -> float:
    """A rough prior of the LLM calls ``strategy`` makes on ``question``, from its settings
    (a fitted router replaces it with the calls measured on your data): a ``Strategy``'s
    own estimate (:meth:`~selfrag_core.strategies.base.Strategy.estimated_calls`, each
    strategy's in its module: plain 1, HyDE one per hypothetical passage and the answer,
    ...; 2 by default), 2 for any other object with a ``plan``."""
    return strategy.estimated_calls(question) if isinstance(strategy, Strategy) else 2.0


# ----------------------------------------------------------------------------- routers


@dataclass(frozen=True)
class Candidate:
    """A strategy the router may hand the question to: its ``name``, its class name
    (``kind``), the LLM calls the question is expected to cost in all if it does
    (``calls``) and those over answering plainly (``extra``)."""

    name: str
    kind: str
    calls: float
    extra: float


@dataclass(frozen=True)
class Decision:
    """What a router decided at one stage: the candidate ``choice`` (None: answer plainly,
    or keep the first answer), the expected gain of each candidate it weighed (None where
    unknown: a rule), and why."""

    choice: str | None
    reason: str
    gains: Mapping[str, float | None] = dataclasses.field(default_factory=dict)


def stage_candidates(
    stage: str,
    expected: Mapping[str, tuple[str, float]],
    budget: float | None,
    continues: frozenset[str] | set[str] = frozenset(),
) -> tuple[list[Candidate], list[str]]:
    """The candidates at ``stage`` (``expected``: each name's class name and expected LLM
    calls) whose calls for the whole question fit ``budget`` (after the answer, plain's
    call counts too, except for those in ``continues``, which go on from the plain answer
    instead of writing it again), and the names of those that do not."""
    within: list[Candidate] = []
    over: list[str] = []
    for name, (kind, calls) in expected.items():
        spent = 0.0 if stage == BEFORE_ANSWER or name in continues else 1.0
        candidate = Candidate(name, kind, spent + calls, calls - 1.0 + spent)
        if budget is None or candidate.calls <= budget + 1e-9:
            within.append(candidate)
        else:
            over.append(name)
    return within, over


@runtime_checkable
class Router(Protocol):
    """Decides, at each stage, whether a question goes to one of the ``candidates``
    (those within the budget) or stays plain."""

    def route(
        self, stage: str, signals: Mapping[str, float], candidates: Sequence[Candidate]
    ) -> Decision: ...


#: the strategies that repair an unsupported or incomplete answer, most gainful first (measured)
REPAIR_ORDER = ("SelfHealingRAG", "SelfIRAG", "HyDERAG")


class RuleRouter:
    """The default rules (no fitting): before the answer, a question of several parts, or
    one comparing two things by date (:func:`~selfrag_core.comparison.comparison`), goes
    to a ``RecursiveRAG`` candidate; after it, an answer that is unsupported by the
    documents, degenerate, a refusal, or that covers less than half of the question (or
    leaves out one of its parts) goes to the first affordable candidate in
    :data:`REPAIR_ORDER` (then any other; a RecursiveRAG one for a missing part); an answer
    from no document stays (a strategy searching the same backend finds none)."""

    def route(self, stage: str, signals: Mapping[str, float], candidates: Sequence[Candidate]) -> Decision:
        decompose = [c for c in candidates if c.kind == "RecursiveRAG"]
        if stage == BEFORE_ANSWER:
            if signals.get("multi_part") and decompose:
                return self._to(decompose[0], f"the question has {int(signals['parts'])} parts: decompose it")
            if signals.get("dated_comparison") and decompose:
                return self._to(decompose[0], "the question compares two things by date: search each")
            return Decision(None, "answer plainly first")
        if not signals.get("retrieved"):
            return Decision(None, "nothing was retrieved: no strategy over this backend finds more")
        if signals.get("missing_parts") and decompose:
            return self._to(decompose[0], "the answer leaves out a part of the question")
        if signals.get("answer_degenerate") or signals.get("answer_refusal"):
            why = "the first answer is unusable or a refusal"
        elif not signals.get("answer_supported"):
            why = "the documents do not support the first answer"
        elif signals.get("answer_coverage", 1.0) < PART_COVERAGE or signals.get("missing_parts"):
            why = f"the first answer covers {signals.get('answer_coverage', 0.0):.0%} of the question"
        else:
            return Decision(None, "the first answer is supported and covers the question")
        order = {kind: i for i, kind in enumerate(REPAIR_ORDER)}
        repair = sorted(
            (c for c in candidates if c.kind != "RecursiveRAG"), key=lambda c: order.get(c.kind, len(order))
        )
        if not repair:
            return Decision(None, f"{why}, but no candidate fits the budget")
        return self._to(repair[0], why)

    @staticmethod
    def _to(candidate: Candidate, why: str) -> Decision:
        return Decision(candidate.name, why, {candidate.name: None})


@dataclass(frozen=True)
class Logistic:
    """``sigmoid(bias + weights . (x - mean) / scale)`` over the named ``signals``."""

    signals: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float

    def probability(self, signals: Mapping[str, float]) -> float:
        z = self.bias + sum(
            w * (float(signals.get(name, 0.0)) - m) / s
            for name, m, s, w in zip(self.signals, self.mean, self.scale, self.weights, strict=True)
        )
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))

    def to_dict(self) -> dict[str, Any]:
        """``{"bias": b, "signals": {name: {"weight", "mean", "scale"}}}``: one weight a signal."""
        return {
            "bias": self.bias,
            "signals": {
                name: {"weight": w, "mean": m, "scale": s}
                for name, m, s, w in zip(self.signals, self.mean, self.scale, self.weights, strict=True)
            },
        }


@dataclass(frozen=True)
class StrategyModel:
    """What a fitted router knows of one candidate: per stage, the chance it answers
    better (``better``) and worse (``worse``) than plain; the mean gain when better and
    loss when worse; its mean LLM calls (and tokens, where known) on questions of one
    part (``single``) and of several (``multi``)."""

    better: Mapping[str, Logistic]
    worse: Mapping[str, Logistic]
    gain: float
    loss: float
    calls: Mapping[str, float]
    tokens: Mapping[str, float] | None = None

    def expected_gain(self, stage: str, signals: Mapping[str, float]) -> tuple[float, float]:
        """(expected gain, chance of answering better) at ``stage``."""
        p_better = self.better[stage].probability(signals)
        return p_better * self.gain - self.worse[stage].probability(signals) * self.loss, p_better

    def to_dict(self) -> dict[str, Any]:
        return {
            "better": {stage: m.to_dict() for stage, m in self.better.items()},
            "worse": {stage: m.to_dict() for stage, m in self.worse.items()},
            "gain": self.gain,
            "loss": self.loss,
            "calls": dict(self.calls),
            "tokens": None if self.tokens is None else dict(self.tokens),
        }


def shape(signals: Mapping[str, float]) -> str:
    """ "multi" for a question of several parts, else "single": how a fitted router's calls are kept."""
    return "multi" if signals.get("multi_part") else "single"


@dataclass(frozen=True)
class FittedRouter:
    """A router fitted on ``selfrag eval`` results (see the module docstring); ``info``
    keeps what it was fitted on and its held-out figures."""

    metric: str
    strategies: Mapping[str, StrategyModel]
    min_gain_per_call: float = MIN_GAIN_PER_CALL
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def calls(self, name: str, signals: Mapping[str, float]) -> float | None:
        """The mean LLM calls ``name`` made on questions of this shape (None: not fitted)."""
        model = self.strategies.get(name)
        return None if model is None else model.calls.get(shape(signals), model.calls.get("all"))

    def route(self, stage: str, signals: Mapping[str, float], candidates: Sequence[Candidate]) -> Decision:
        gains: dict[str, float | None] = {}
        best: tuple[float, Candidate, float] | None = None
        for candidate in candidates:
            model = self.strategies.get(candidate.name)
            if model is None:
                continue
            gain, p_better = model.expected_gain(stage, signals)
            gains[candidate.name] = round(gain, 6)
            value = gain - self.min_gain_per_call * max(candidate.extra, 0.0)
            if value > 0 and (stage == AFTER_ANSWER or p_better >= 0.5) and (best is None or value > best[0]):
                best = (value, candidate, p_better)
        if best is None:
            why = "answer plainly first" if stage == BEFORE_ANSWER else "keep the first answer"
            floor = f"{self.min_gain_per_call} {self.metric}"
            return Decision(None, f"no candidate is expected to gain {floor} a call: {why}", gains)
        value, candidate, p_better = best
        why = (
            f"{candidate.name} is expected to gain {gains[candidate.name]:+.3f} {self.metric} "
            f"(better than plain with p={p_better:.2f}) for {candidate.extra:.1f} more call(s)"
        )
        return Decision(candidate.name, why, gains)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": ROUTER_SCHEMA,
            "metric": self.metric,
            "min_gain_per_call": self.min_gain_per_call,
            "strategies": {name: m.to_dict() for name, m in self.strategies.items()},
            **({"info": dict(self.info)} if self.info else {}),
        }


# ----------------------------------------------------------------------------- loading


def _bad(where: str, what: str) -> ConfigurationError:
    return ConfigurationError(
        f"the router {where} is not a valid {ROUTER_SCHEMA} file: {what}; fit one with "
        "`selfrag eval QUESTIONS --fit-router router.json`"
    )


def _number(value: Any, where: str, what: str, *, low: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(where, f"{what} must be a finite number, not {type(value).__name__} {value!r:.40}")
    if low is not None and value < low:
        raise _bad(where, f"{what} must be at least {low}, not {value}")
    return float(value)


def _mapping(value: Any, where: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _bad(where, f"{what} must be an object, not {type(value).__name__}")
    return value


def _logistic(data: Any, where: str, what: str) -> Logistic:
    data = _mapping(data, where, what)
    signals = _mapping(data.get("signals"), where, f"{what}.signals")
    unknown = sorted(set(map(str, signals)) - set(SIGNALS))
    if unknown:
        raise _bad(where, f"{what}.signals names unknown signals {unknown} (known: {', '.join(SIGNALS)})")
    columns: dict[str, list[float]] = {"mean": [], "scale": [], "weight": []}
    for name, entry in signals.items():
        entry = _mapping(entry, where, f"{what}.signals.{name}")
        for key, values in columns.items():
            values.append(_number(entry.get(key), where, f"{what}.signals.{name}.{key}"))
    if any(s <= 0 for s in columns["scale"]):
        raise _bad(where, f"{what}: every scale must be positive")
    bias = _number(data.get("bias"), where, f"{what}.bias")
    names = tuple(map(str, signals))
    return Logistic(names, tuple(columns["mean"]), tuple(columns["scale"]), tuple(columns["weight"]), bias)


def _shapes(value: Any, where: str, what: str) -> dict[str, float]:
    return {
        str(k): _number(v, where, f"{what}.{k}", low=0.0)
        for k, v in _mapping(value, where, what).items()
        if k in ("single", "multi", "all")
    }


def _strategy_model(data: Any, where: str, name: str) -> StrategyModel:
    what = f"strategies.{name}"
    data = _mapping(data, where, what)
    models: dict[str, dict[str, Logistic]] = {"better": {}, "worse": {}}
    for outcome, by_stage in models.items():
        stages = _mapping(data.get(outcome), where, f"{what}.{outcome}")
        for stage in STAGES:
            if stage not in stages:
                raise _bad(where, f"{what}.{outcome} has no {stage!r} model")
            by_stage[stage] = _logistic(stages[stage], where, f"{what}.{outcome}.{stage}")
    calls = _shapes(data.get("calls"), where, f"{what}.calls")
    if not calls:
        raise _bad(where, f"{what}.calls must give the mean calls of 'single' and 'multi' questions")
    tokens = data.get("tokens")
    return StrategyModel(
        models["better"],
        models["worse"],
        _number(data.get("gain"), where, f"{what}.gain", low=0.0),
        _number(data.get("loss"), where, f"{what}.loss", low=0.0),
        calls,
        None if tokens is None else _shapes(tokens, where, f"{what}.tokens"),
    )


def router_from_dict(data: Any, where: str = "(given as a dict)") -> FittedRouter:
    """A :class:`FittedRouter` from the plain data of a router file, validated; raises
    :class:`~selfrag_core.errors.ConfigurationError` naming the first bad field."""
    data = _mapping(data, where, "the file")
    if data.get("schema") != ROUTER_SCHEMA:
        raise _bad(where, f"its schema is {data.get('schema')!r}, expected {ROUTER_SCHEMA!r}")
    metric = data.get("metric")
    if not isinstance(metric, str) or not metric:
        raise _bad(where, "metric must name the metric it was fitted on")
    strategies = _mapping(data.get("strategies"), where, "strategies")
    if not strategies:
        raise _bad(where, "strategies is empty: it routes to nothing")
    models = {str(name): _strategy_model(model, where, str(name)) for name, model in strategies.items()}
    threshold = _number(data.get("min_gain_per_call", MIN_GAIN_PER_CALL), where, "min_gain_per_call", low=0.0)
    info = data.get("info") or {}
    return FittedRouter(metric, models, threshold, dict(_mapping(info, where, "info")))


def load_router(source: str | os.PathLike[str] | Mapping[str, Any]) -> FittedRouter:
    """The router in a JSON file (``selfrag eval --fit-router``) or its data: read as JSON
    only (no code runs), validated; :class:`~selfrag_core.errors.ConfigurationError`
    for a missing, unreadable or malformed file."""
    if isinstance(source, Mapping):
        return router_from_dict(source)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError(
            f"cannot read the router {path}: {e}; give the file `selfrag eval --fit-router` wrote"
        ) from e
    try:
        data = load_json(text)
    except ValueError as e:
        raise _bad(str(path), f"it is not JSON ({e})") from e
    return router_from_dict(data, str(path))


# ----------------------------------------------------------------------------- the strategy


#: the order of the default candidates (:func:`candidate_names`), the order their route notes list them in
CANDIDATE_ORDER = ("recursive", "hyde", "self", "healing")
#: a default candidate's settings beside ``top_k`` and the checks: RecursiveRAG splits by
#: rule, one level, its parts joined; SelfIRAG keeps its own ``top_k``
CANDIDATE_SETTINGS: dict[str, dict[str, Any]] = {
    "recursive": {"max_depth": 1, "decomposition": "rules", "merge": False},
    "self": {"top_k": SelfRAGConfig.top_k},
}
#: where the default candidates come from: the registry's ``BUILT_IN``, which
#: ``strategies.registry`` hands in when it is imported (:func:`candidates_from`); it
#: imports this module, so this module does not import it
_candidate_table: list[Mapping[str, Any]] = []


def candidates_from(table: Mapping[str, Any]) -> None:
    """Take the default candidates from ``table`` (names and their entries, with
    ``compared``, ``config`` and ``build``): ``strategies.registry`` calls it with its
    :data:`~selfrag_core.strategies.registry.BUILT_IN`."""
    _candidate_table[:] = [table]


def candidate_names() -> tuple[str, ...]:
    """The names of the default candidates: the table's entries compared by default, in
    :data:`CANDIDATE_ORDER`, then any other in the table's order."""
    names = [name for table in _candidate_table for name, entry in table.items() if entry.compared]
    rank = {name: i for i, name in enumerate(CANDIDATE_ORDER)}
    return tuple(sorted(names, key=lambda name: rank.get(name, len(rank))))


def default_candidates(
    rag_system: BackendLike, llm: LLMLike, *, top_k: int, execution: ExecutionConfig | None,
    prompts: Mapping[str, str] | Prompts | None, verifier: Verifier | None = None,
    rules: tuple[AnswerRule, ...] = (),
) -> dict[str, Strategy[Any]]:  # fmt: skip
    """The candidates of an ``AdaptiveRAG`` given none (:func:`candidate_names`), by the
    names ``selfrag eval`` gives them: ``recursive`` (split by rule, parts joined),
    ``hyde``, ``self``, ``healing`` (plain, then that HyDE), each built by its registry
    entry with ``top_k`` and :data:`CANDIDATE_SETTINGS`, otherwise with its own defaults,
    and each with ``verifier`` and answer ``rules`` (the AdaptiveRAG's: chosen once)."""
    shared: dict[str, Any] = {"execution": execution, "prompts": prompts}
    checks: dict[str, Any] = {"verifier": verifier, "rules": rules}
    built: dict[str, Strategy[Any]] = {}

    def sized(name: str) -> Strategy[Any]:
        if name not in built:
            entry = _candidate_table[0][name]
            config = entry.config(**{"top_k": top_k, **checks, **CANDIDATE_SETTINGS.get(name, {})})
            built[name] = entry.build(rag_system, llm, config, sized, shared, {})
        return built[name]

    return {name: sized(name) for name in candidate_names()}


class AdaptiveRAG(Strategy[Answer]):
    """``AdaptiveRAG(rag_system, llm, config=None, *, strategies=None, router=None,
    call_budget=None, execution=None, prompts=None)``; ``config`` (an
    :class:`~selfrag_core.config.AdaptiveRAGConfig`) sizes the plain answer (``top_k``,
    ``llm_retries``; as keywords still accepted, deprecated) and its ``verifier`` (None:
    the LLM-free ``LexicalVerifier``) judges the plain answer's support for the router;
    the default candidates are built with it, candidates you pass keep their own.

    Answers plainly (one retrieval, the ``grounded_answer`` prompt) unless the router
    hands the question to one of ``strategies`` (``{name: strategy}``; default
    :func:`default_candidates`), before the answer or after it (see the module
    docstring). ``router``: a :class:`Router`, a router file's path or data
    (:func:`load_router`), or None for the :class:`RuleRouter`. ``call_budget``: the most
    LLM calls a question is expected to cost (at least 1; None: no limit): no candidate
    over it is chosen, and ``execution.max_llm_calls`` is capped at its ceiling.

    The result is an :class:`~selfrag_core.types.Answer` whose ``details`` say which
    ``strategy`` answered (``"plain"`` or a candidate's name) and at which ``stage`` it
    was chosen; every decision is a ``route`` note in the trace. An escalation that fails
    or gives no usable answer keeps the plain answer (a fallback note says so).
    """

    config: AdaptiveRAGConfig

    def __init__(
        self,
        rag_system: BackendLike,
        llm: LLMLike,
        config: AdaptiveRAGConfig | None = None,
        *,
        strategies: Mapping[str, Any] | None = None,
        router: Router | str | os.PathLike[str] | Mapping[str, Any] | None = None,
        call_budget: float | None = None,
        execution: ExecutionConfig | None = None,
        prompts: Mapping[str, str] | Prompts | None = None,
        top_k: int | None = None,
        llm_retries: int | None = None,
    ) -> None:
        super().__init__(rag_system, llm, execution=execution, prompts=prompts)
        given = {"top_k": top_k, "llm_retries": llm_retries}
        self.config = config_from(AdaptiveRAGConfig, config, "AdaptiveRAG", given, deprecated=given)
        if strategies is None:
            strategies = default_candidates(
                rag_system, llm, top_k=self.config.top_k, execution=execution, prompts=prompts,
                verifier=self.config.verifier, rules=self.config.rules,
            )  # fmt: skip
        if not isinstance(strategies, Mapping):
            raise TypeError("strategies must be a dict {name: strategy}")
        for name, strategy in strategies.items():
            if not isinstance(name, str) or not name or name == "plain":
                raise ValueError(f"strategy names must be non-empty strings other than 'plain', got {name!r}")
            if not callable(getattr(strategy, "plan", None)):
                raise TypeError(
                    f"strategies[{name!r}] is a {type(strategy).__name__}, not a selfrag strategy"
                )
        self.strategies: dict[str, Any] = dict(strategies)
        if router is None:
            router = RuleRouter()
        elif isinstance(router, (str, os.PathLike, Mapping)):
            router = load_router(router)
        if not isinstance(router, Router):
            raise TypeError("router must be a Router (route(stage, signals, candidates)), a path or None")
        self.router: Router = router
        if isinstance(router, FittedRouter):
            unknown = sorted(set(router.strategies) - set(self.strategies))
            if unknown:
                raise ConfigurationError(
                    f"the router routes to {unknown}, which this AdaptiveRAG has no strategy for (it has "
                    f"{sorted(self.strategies)}); pass strategies={{name: strategy}} with those names"
                )
        self.call_budget = _check_budget(call_budget)
        if self.call_budget is not None:
            cap = math.ceil(self.call_budget)
            limit = self.execution.max_llm_calls
            self.execution = dataclasses.replace(
                self.execution, max_llm_calls=cap if limit is None else min(limit, cap)
            )

    # ------------------------------------------------------------------ routing
    def estimated_calls(self, query: str) -> float:
        """Its plain answer, and an escalation now and then."""
        return 1.5

    def expected_calls(self, name: str, signals: Mapping[str, float], question: str) -> float:
        """The LLM calls candidate ``name`` is expected to make: measured by a fitted
        router, else :func:`estimate_calls`."""
        measured = self.router.calls(name, signals) if isinstance(self.router, FittedRouter) else None
        return estimate_calls(self.strategies[name], question) if measured is None else measured

    def candidates(
        self, stage: str, signals: Mapping[str, float], question: str
    ) -> tuple[list[Candidate], list[str]]:
        """The candidates within the budget at ``stage``, and the names of those over it."""
        expected = {
            name: (type(strategy).__name__, self.expected_calls(name, signals, question))
            for name, strategy in self.strategies.items()
        }
        return stage_candidates(stage, expected, self.call_budget, self.continuing())

    def continuing(self) -> set[str]:
        """The candidates that go on from the plain answer rather than answer again
        (``continue_answer``: :class:`~selfrag_core.strategies.plain.DraftsRAG` writes only
        its drafts beside it): those over the same backend and LLM with the same ``top_k``."""
        return {
            name
            for name, s in self.strategies.items()
            if continues_answers(s)
            and s.rag_system is self.rag_system
            and s.llm is self.llm
            and getattr(getattr(s, "config", None), "top_k", None) == self.config.top_k
        }

    def decide(self, stage: str, question: str, signals: Mapping[str, float]) -> Plan[Decision]:
        """The router's decision at ``stage``, recorded as a ``route`` note."""
        candidates, over = self.candidates(stage, signals, question)
        decision = self.router.route(stage, signals, candidates)
        if decision.choice is not None and decision.choice not in {c.name for c in candidates}:
            raise ConfigurationError(
                f"the router chose {decision.choice!r}, which is not among the candidates within the "
                f"budget ({sorted(c.name for c in candidates)})"
            )
        detail = {
            "stage": stage,
            "choice": decision.choice or "plain",
            "reason": decision.reason,
            "expected_gain": dict(decision.gains),
            "expected_calls": {c.name: round(c.calls, 3) for c in candidates},
            "over_budget": over,
            "call_budget": self.call_budget,
            "router": type(self.router).__name__,
            "signals": {k: round(v, 4) for k, v in signals.items()},
        }
        yield Note("route", None, detail, kind="decision")
        return decision

    # ------------------------------------------------------------------ the plan
    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        cfg = self.config
        docs = yield from retrieve_or_empty(self.rag_system, query, cfg.top_k, retrieval_options(context))
        decision = yield from self.decide(BEFORE_ANSWER, query, route_signals(query, docs))
        if decision.choice is not None:
            plan = self.strategies[decision.choice].plan(query, context)
            chosen = yield from self._escalate(decision.choice, plan, streamed=True)
            if chosen is not None:
                return _answer(chosen, decision.choice, BEFORE_ANSWER)
        reply = None
        if docs:
            try:
                reply = yield from grounded_reply(self, query, docs, cfg.llm_retries)
                answer = yield from checked_answer(reply.strip(), query, docs, self.rules, self.quotes)
            except RAGSystemError as e:
                yield Note("generation_failed", f"{type(e).__name__}: {e}", {"then": "route the failure"})
                answer, docs = GENERATION_FAILED_ANSWER, []
        else:
            yield Note("not_enough_information", "retrieval returned no documents", {"query": query[:200]})
            answer = NOT_ENOUGH_ANSWER
        plain = Answer(answer, docs, {"strategy": "plain", "stage": None})
        if decision.choice is not None:
            return plain  # the question's one escalation failed: no second one
        signals = route_signals(query, docs, answer, verifier=self.verifier)
        decision = yield from self.decide(AFTER_ANSWER, query, signals)
        if decision.choice is None:
            return plain
        strategy = self.strategies[decision.choice]
        if reply is not None and decision.choice in self.continuing():
            plan = strategy.continue_answer(query, docs, reply)
        else:
            plan = strategy.plan(query, context)
        chosen = yield from self._escalate(decision.choice, plan, streamed=False)
        return plain if chosen is None else _answer(chosen, decision.choice, AFTER_ANSWER)

    def _escalate(self, name: str, plan: Plan[Any], *, streamed: bool) -> Plan[Any]:
        """The result of candidate ``name``'s ``plan``, or None (with a fallback note) when
        it failed or said nothing. Its answer streams when no answer was streamed before it."""
        try:
            result = yield from (plan if streamed else without_streaming(plan))
        except RAGSystemError as e:
            why: str | None = f"{type(e).__name__}: {e}"
        else:
            answer = getattr(result, "answer", None)
            usable = isinstance(answer, str) and answer.strip() not in _EMPTY_ANSWERS
            why = None if usable else f"{name} gave no usable answer ({str(answer)[:80]!r})"
        if why is None:
            return result
        then = "answer plainly" if streamed else "keep the first answer"
        yield Note("escalation_failed", why, {"strategy": name, "then": then})
        return None


def _answer(result: Any, name: str, stage: str) -> Answer:
    citations = list(getattr(result, "citations", None) or [])
    return Answer(
        str(result.answer),
        list(getattr(result, "sources", [])),
        {"strategy": name, "stage": stage},
        citations=citations,
    )


def _check_budget(budget: float | None) -> float | None:
    if budget is None:
        return None
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget):
        raise TypeError(f"call_budget must be a number of LLM calls or None, got {budget!r}")
    if budget < 1:
        raise ValueError(f"call_budget must be at least 1 (a plain answer is one call), got {budget}")
    return float(budget)
