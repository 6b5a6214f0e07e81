"""Fit :class:`~selfrag_core.strategies.adaptive.AdaptiveRAG`'s router on a ``selfrag eval`` run.

``selfrag eval QUESTIONS --strategies plain,self,recursive,healing --fit-router router.json``
runs the contenders, then fits, on a random share of the questions (the rest held out):

* per candidate strategy and stage (before the answer: the question's and the retrieval's
  signals; after it: the first answer's too), two L2-regularised logistic regressions
  (numpy, Newton steps) over the baseline's routing signals (``route_signals``, recorded in
  ``results.jsonl``): the chance that the candidate scores higher than plain on the
  metric, and lower;
* the candidate's mean gain when higher and loss when lower, and its mean LLM calls (and
  tokens) on questions of one part and of several;
* the gain an extra LLM call must buy (``min_gain_per_call``): of :data:`THRESHOLDS`, the
  one whose router, replayed on the fitting questions, scores best (ties: the fewest calls).

The router is then replayed on the held-out questions from the recorded results (the
candidate's score, calls and latency where it routes to one, plain's plus the
candidate's after the first answer) and that row is compared, question by question, with
plain and with the best single strategy (the one with the highest mean on the fitting
questions), by the report's paired bootstrap. The router file is JSON
(``selfrag.router/1``): its weights, named signal by signal, and these figures under
``info``. From Python::

    from selfrag_core.evaluation.router import fit_router
    fit = fit_router("eval-results/hotpot", holdout=0.3)
    print(fit.table()); fit.write("router.json")
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from selfrag_core.config import DEFAULT_TOP_K, ExecutionConfig
from selfrag_core.engine import Run, run_sync
from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation.data import EvalData
from selfrag_core.evaluation.gate import _number, _results_file, load_results
from selfrag_core.evaluation.metrics import paired_difference
from selfrag_core.evaluation.report import EvalReport, _grid
from selfrag_core.evaluation.runner import _backend, corpus_documents, has_index, index_in_memory, ranks_only
from selfrag_core.presets import ADAPTIVE, BASELINE, build_strategy
from selfrag_core.progress import Steps, step
from selfrag_core.prompts import detect_language
from selfrag_core.strategies.adaptive import (
    AFTER_ANSWER,
    BEFORE_ANSWER,
    MIN_GAIN_PER_CALL,
    QUESTION_SIGNALS,
    SIGNALS,
    AdaptiveRAG,
    FittedRouter,
    Logistic,
    StrategyModel,
    continues_answers,
    estimate_calls,
    route_signals,
    shape,
    stage_candidates,
)
from selfrag_core.strategies.base import format_context, retrieve_or_empty
from selfrag_core.strategies.registry import BUILT_IN

#: the signals each stage's models read
STAGE_SIGNALS = {BEFORE_ANSWER: QUESTION_SIGNALS, AFTER_ANSWER: SIGNALS}
#: the default share of the questions held out from the fit
HOLDOUT = 0.3
#: the weight of the L2 penalty on the (standardised) weights
L2 = 1.0
#: the gains an extra LLM call must buy that the fit chooses from (in the metric's units)
THRESHOLDS = (0.0, 0.0025, MIN_GAIN_PER_CALL, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32)
#: the row of the fitted router in the figures
ROUTED = "adaptive (fitted)"


# ----------------------------------------------------------------------------- the data


def _rows(
    run: EvalReport | str | os.PathLike[str],
) -> tuple[str, list[tuple[str, dict[str, dict[str, Any]]]]]:
    """(the run's name, [(question id, {contender: its record})]) of a report or a run's folder."""
    if isinstance(run, EvalReport):
        pairs = [(q.id, dict(r)) for q, r in zip(run.questions, run.results, strict=True) if r]
        return run.name, pairs
    path = _results_file(run)  # the run's folder, its summary.json or its results.jsonl
    pairs = list(load_results(path).items())
    return path.parent.name, pairs


def _value(record: Mapping[str, Any] | None, metric: str) -> float | None:
    return None if record is None else _number((record.get("metrics") or {}).get(metric))


def _cost(record: Mapping[str, Any] | None, key: str) -> float | None:
    return None if record is None else _number(record.get(key))


@dataclass
class _Question:
    id: str
    signals: dict[str, float]
    records: dict[str, dict[str, Any]]


def _questions(pairs: list[tuple[str, dict[str, dict[str, Any]]]], baseline: str) -> list[_Question]:
    out = []
    for qid, records in sorted(pairs, key=lambda pair: pair[0]):  # results.jsonl is in finishing order
        signals = (records.get(baseline) or {}).get("signals")
        if isinstance(signals, Mapping) and all(_number(signals.get(s)) is not None for s in SIGNALS):
            out.append(_Question(qid, {s: float(signals[s]) for s in SIGNALS}, records))
    return out


# ----------------------------------------------------------------------------- the models


def _sigmoid(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(z, -50.0, 50.0)))
    return out


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = L2) -> tuple[np.ndarray, float]:
    """Weights and bias of an L2-regularised logistic regression of ``y`` (0/1) on the
    standardised columns of ``x``, by Newton steps. With one class only: no weights and
    the smoothed share of that class as the bias."""
    n, d = x.shape
    share = (float(y.sum()) + 0.5) / (n + 1.0)
    if n == 0 or y.min() == y.max():
        return np.zeros(d), math.log(share / (1.0 - share))
    a = np.hstack([np.ones((n, 1)), x])
    w = np.zeros(d + 1)
    w[0] = math.log(share / (1.0 - share))
    penalty = l2 * np.eye(d + 1)
    penalty[0, 0] = 1e-6
    for _ in range(100):
        p = _sigmoid(a @ w)
        gradient = a.T @ (p - y) + penalty @ w
        hessian = a.T @ (a * (p * (1.0 - p))[:, None]) + penalty
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if float(np.abs(step).max()) < 1e-8:
            break
    return w[1:], float(w[0])


def _logistic(rows: list[dict[str, float]], y: np.ndarray, names: Sequence[str], l2: float) -> Logistic:
    x = np.array([[row[n] for n in names] for row in rows], dtype=float).reshape(len(rows), len(names))
    mean = x.mean(axis=0) if len(rows) else np.zeros(len(names))
    scale = x.std(axis=0) if len(rows) else np.ones(len(names))
    scale = np.where(scale > 1e-9, scale, 1.0)
    weights, bias = fit_logistic((x - mean) / scale, y, l2)
    return Logistic(
        tuple(names),
        tuple(round(float(v), 6) for v in mean),
        tuple(round(float(v), 6) for v in scale),
        tuple(round(float(v), 6) for v in weights),
        round(bias, 6),
    )


def _means(questions: list[_Question], name: str, key: str) -> dict[str, float] | None:
    """The mean of a cost per question shape ("single", "multi") and over all, where known."""
    by: dict[str, list[float]] = {"single": [], "multi": [], "all": []}
    for q in questions:
        value = _cost(q.records.get(name), key) if key != "tokens" else _tokens(q.records.get(name))
        if value is not None:
            by[shape(q.signals)].append(value)
            by["all"].append(value)
    means = {k: round(sum(v) / len(v), 4) for k, v in by.items() if v}
    return means or None


def _tokens(record: Mapping[str, Any] | None) -> float | None:
    given = [_cost(record, "input_tokens"), _cost(record, "output_tokens")]
    return None if given[0] is None else given[0] + (given[1] or 0.0)


def _strategy_model(
    questions: list[_Question], name: str, baseline: str, metric: str, l2: float
) -> StrategyModel | None:
    rows, diffs = [], []
    for q in questions:
        ours, theirs = _value(q.records.get(name), metric), _value(q.records.get(baseline), metric)
        if ours is not None and theirs is not None:
            rows.append(q.signals)
            diffs.append(ours - theirs)
    if not rows:
        return None
    d = np.array(diffs)
    better, worse = (d > 1e-9).astype(float), (d < -1e-9).astype(float)
    calls = _means(questions, name, "llm_calls") or {"all": 1.0}
    return StrategyModel(
        {stage: _logistic(rows, better, names, l2) for stage, names in STAGE_SIGNALS.items()},
        {stage: _logistic(rows, worse, names, l2) for stage, names in STAGE_SIGNALS.items()},
        round(float(d[d > 1e-9].mean()), 6) if better.any() else 0.0,
        round(float(-d[d < -1e-9].mean()), 6) if worse.any() else 0.0,
        calls,
        _means(questions, name, "tokens"),
    )


# ----------------------------------------------------------------------------- replaying


def continuing(names: Sequence[str] | Mapping[str, Any]) -> set[str]:
    """The built-in strategies among ``names`` that go on from the plain answer after it
    (``continue_answer``: ``drafts``): their recorded calls include the plain answer's."""
    return {n for n in names if n in BUILT_IN and n != BASELINE and continues_answers(BUILT_IN[n].strategy)}


def routed(
    router: FittedRouter, question: _Question, baseline: str, metric: str, budget: float | None = None
) -> tuple[str, str | None, float | None, float | None, float | None]:
    """What the router does with a recorded question: (the strategy that answers, the
    stage it was chosen at, its score, the question's calls and latency)."""
    plain = question.records.get(baseline)
    expected = {name: (name, router.calls(name, question.signals) or 1.0) for name in router.strategies}
    going_on = continuing(router.strategies)
    for stage in (BEFORE_ANSWER, AFTER_ANSWER):
        candidates, _ = stage_candidates(stage, expected, budget, going_on)
        choice = router.route(stage, question.signals, candidates).choice
        record = None if choice is None else question.records.get(choice)
        if record is None or _value(record, metric) is None:
            continue
        calls, latency = _cost(record, "llm_calls"), _cost(record, "latency_s")
        if stage == AFTER_ANSWER and choice not in going_on:  # plain's answer came first
            calls = None if calls is None else calls + (_cost(plain, "llm_calls") or 0.0)
            latency = None if latency is None else latency + (_cost(plain, "latency_s") or 0.0)
        return str(choice), stage, _value(record, metric), calls, latency
    return baseline, None, _value(plain, metric), _cost(plain, "llm_calls"), _cost(plain, "latency_s")


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 6) if known else None


@dataclass
class RouterFit:
    """A fitted router and its figures on the held-out questions: ``rows`` (each
    contender's and the router's mean score, calls and latency), ``comparisons`` (the
    router against plain and the best single strategy, paired), ``routes`` (how often
    each strategy answered)."""

    router: FittedRouter
    metric: str
    baseline: str
    best: str
    train: list[str]
    held_out: list[str]
    rows: dict[str, dict[str, float | None]] = field(default_factory=dict)
    comparisons: dict[str, dict[str, Any]] = field(default_factory=dict)
    routes: dict[str, int] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "baseline": self.baseline,
            "best_single": self.best,
            "questions": {"fitted": len(self.train), "held_out": len(self.held_out)},
            "held_out": {"rows": self.rows, "comparisons": self.comparisons, "routes": self.routes},
        }

    def table(self) -> str:
        """The held-out rows and comparisons as text."""
        head = [f"held out ({len(self.held_out)} q)", self.metric, "calls/q", "latency s/q"]
        rows = [head] + [
            [name, _fmt(r["quality"]), _fmt(r["calls"], 2), _fmt(r["latency_s"], 2)]
            for name, r in self.rows.items()
        ]
        lines = [
            f"router fitted on {len(self.train)} question(s), {self.metric} against {self.baseline}; "
            f"the best single strategy on them: {self.best}",
            *_grid(rows),
            "",
        ]
        compared = [["adaptive (fitted) vs", "difference", "95% interval", "n", "verdict"]]
        compared += [
            [name, f"{d['mean']:+.3f}", f"[{d['low']:+.3f}, {d['high']:+.3f}]", str(d["n"]), d["verdict"]]
            for name, d in self.comparisons.items()
        ]
        routes = ", ".join(f"{name} {n}" for name, n in sorted(self.routes.items(), key=lambda kv: -kv[1]))
        return "\n".join([*lines, *_grid(compared), f"answered by: {routes}"])

    def write(self, path: str | os.PathLike[str]) -> Path:
        """The router file (JSON, ``selfrag.router/1``), its figures under ``info``."""
        target = Path(path)
        data = self.router.to_dict()
        data["info"] = {**dict(self.router.info), **self.figures()}
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
        return target


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def fit_router(
    run: EvalReport | str | os.PathLike[str],
    *,
    metric: str | None = None,
    baseline: str = BASELINE,
    holdout: float = HOLDOUT,
    seed: int = 0,
    min_gain_per_call: float | None = None,
    call_budget: float | None = None,
    l2: float = L2,
) -> RouterFit:
    """Fit a router on ``run`` (an :class:`EvalReport`, a run's folder or its
    ``results.jsonl``), holding out ``holdout`` of its questions (drawn with ``seed``), on
    ``metric`` (default: F1 where the run has it, else its first metric). The candidates
    are every contender but the baseline and ``adaptive``. ``call_budget`` applies to the
    held-out replay (and the choice of ``min_gain_per_call``, when None). Raises
    ConfigurationError when the run cannot be fitted on."""
    if not 0 <= holdout < 1:
        raise ConfigurationError(f"holdout must be a share of the questions in [0, 1), got {holdout}")
    if min_gain_per_call is not None and not (math.isfinite(min_gain_per_call) and min_gain_per_call >= 0):
        raise ConfigurationError(f"min_gain_per_call must be a number >= 0, got {min_gain_per_call}")
    name, pairs = _rows(run)
    questions = _questions(pairs, baseline)
    if len(questions) < 4:
        raise ConfigurationError(
            f"{len(questions)} question(s) of {name} carry {baseline}'s routing signals; fitting needs at "
            f"least 4: run selfrag eval with {baseline} among the contenders (this version records them)"
        )
    names = sorted({n for q in questions for n in q.records} - {baseline, ADAPTIVE})
    metric = metric or _default_metric(questions, baseline)
    if not names:
        raise ConfigurationError(f"{name} has no contender besides {baseline}: nothing to route to")
    train, held = _split(questions, holdout, seed)
    models = {n: m for n in names if (m := _strategy_model(train, n, baseline, metric, l2)) is not None}
    if not models:
        raise ConfigurationError(f"no contender of {name} has {metric} scores to fit on")
    info = {"fitted_on": name, "seed": seed, "holdout": holdout, "l2": l2}
    info["threshold"] = "given" if min_gain_per_call is not None else "chosen on the fitting questions"
    if min_gain_per_call is None:  # the cheapest threshold that scores best on the fitting questions
        min_gain_per_call = _threshold(FittedRouter(metric, models, 0.0, info), train, baseline, call_budget)
    router = FittedRouter(metric, models, min_gain_per_call, info)
    best = _best_single(train, [baseline, *models], baseline, metric)
    fit = RouterFit(router, metric, baseline, best, [q.id for q in train], [q.id for q in held])
    _replay(fit, held, call_budget)
    return fit


def _split(questions: list[_Question], holdout: float, seed: int) -> tuple[list[_Question], list[_Question]]:
    """The questions to fit on and those held out (``holdout`` of them, at least one and
    leaving two to fit on; drawn with ``seed``), each in the run's order."""
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    cut = min(max(1, round(len(order) * holdout)), len(order) - 2) if holdout > 0 else 0
    held = [questions[i] for i in sorted(order[:cut])]
    train = [questions[i] for i in sorted(order[cut:])]
    return train, held


def _best_single(questions: list[_Question], names: list[str], baseline: str, metric: str) -> str:
    """Of ``names``, the contender with the best mean ``metric`` on ``questions`` (ties:
    the baseline)."""
    means = {n: _mean([_value(q.records.get(n), metric) for q in questions]) for n in names}
    return max(means, key=lambda n: (means[n] if means[n] is not None else -math.inf, n == baseline))


def _threshold(
    router: FittedRouter, questions: list[_Question], baseline: str, budget: float | None
) -> float:
    """Of :data:`THRESHOLDS`, the one whose router replays best on ``questions`` (ties: the
    fewer calls, then the higher threshold)."""
    scored = []
    for threshold in THRESHOLDS:
        trial = dataclasses.replace(router, min_gain_per_call=threshold)
        outcomes = [routed(trial, q, baseline, router.metric, budget) for q in questions]
        quality, calls = _mean([o[2] for o in outcomes]), _mean([o[3] for o in outcomes])
        scored.append((round(quality or 0.0, 9), -(calls or 0.0), threshold))
    return max(scored)[2]


def _default_metric(questions: list[_Question], baseline: str) -> str:
    seen = [str(m) for q in questions for m in (q.records.get(baseline) or {}).get("metrics", {})]
    for preferred in ("f1", "gold_in_answer", "ndcg@10"):
        if preferred in seen:
            return preferred
    if not seen:
        raise ConfigurationError(f"{baseline} has no metric to fit on: give the questions gold answers")
    return seen[0]


def _replay(fit: RouterFit, held: list[_Question], budget: float | None) -> None:
    outcomes = [routed(fit.router, q, fit.baseline, fit.metric, budget) for q in held]
    fit.routes = dict(Counter(o[0] for o in outcomes))
    for name in [fit.baseline, *fit.router.strategies]:
        records = [q.records.get(name) for q in held]
        fit.rows[name] = {
            "quality": _mean([_value(r, fit.metric) for r in records]),
            "calls": _mean([_cost(r, "llm_calls") for r in records]),
            "latency_s": _mean([_cost(r, "latency_s") for r in records]),
        }
    fit.rows[ROUTED] = {
        "quality": _mean([o[2] for o in outcomes]),
        "calls": _mean([o[3] for o in outcomes]),
        "latency_s": _mean([o[4] for o in outcomes]),
    }
    for other in dict.fromkeys([fit.baseline, fit.best]):
        theirs = [_value(q.records.get(other), fit.metric) for q in held]
        difference = paired_difference([o[2] for o in outcomes], theirs, seed=0)
        if difference is not None:
            fit.comparisons[other] = difference.to_dict()


# ----------------------------------------------------------------------------- dry run


class _NoLLM:
    """Stands for the LLM in a dry run: any call is a bug, and says so."""

    def generate(self, prompt: str) -> str:
        raise ConfigurationError("a dry run makes no LLM call")


class _NoSearch:
    """Stands for the backend in a retrieval-only dry run, which searches nothing."""

    def retrieve(self, query: str, top_k: int = 3) -> list[Any]:
        raise ConfigurationError("a retrieval-only dry run searches nothing")


def dry_run_backend(
    data: EvalData, names: Sequence[str] = (), rag: Any = None, *, corpus: Any = None, index: Any = None,
    embed: str = "auto", steps: Steps | None = None,
) -> tuple[Any, str]:  # fmt: skip
    """The backend a dry run searches, and what its estimate is based on (a phrase: "the
    passages ... retrieves"): ``rag`` when given; the index in ``index`` when it holds
    one; else ``corpus`` (or the data's own) in a lexical (BM25) index in memory, chunked
    as :func:`~selfrag_core.evaluation.evaluate` chunks it, but nothing embedded, so it
    takes seconds where embedding a corpus takes minutes (and nothing is written to
    ``index``). A run whose ``embed`` embeds may retrieve other passages, of other
    lengths (and AdaptiveRAG among ``names`` route on other scores): the phrase says so."""
    if rag is not None:
        return rag, "the passages the backend retrieves"
    if has_index(index):
        return _backend(data, corpus, index, embed, list(data.problems), steps), (
            f"the passages the index {index} retrieves, as the run will"
        )
    docs = corpus_documents(data, corpus, list(data.problems))
    rag = index_in_memory(docs, embed="none", steps=steps, label="indexing (lexical, for the estimate)")
    basis = f"the passages a lexical (BM25) search of the corpus's {len(docs):,} documents retrieves"
    if _embeds(embed):
        also = ", and route adaptive on other scores" if ADAPTIVE in names else ""
        basis += f" (nothing embedded: the run, embedder {embed}, may retrieve others{also})"
    else:
        basis += " (as the run will: it embeds nothing)"
    return rag, basis


def _embeds(embed: str) -> bool:
    """Whether an index built with ``embed`` embeds its documents."""
    if embed == "auto":
        from selfrag_core.local.embeddings import embeddings_available

        return embeddings_available()
    return embed != "none"


def dry_run(
    data: EvalData, names: Sequence[str], rag: Any = None, *, corpus: Any = None, index: Any = None,
    embed: str = "auto", top_k: int | None = 3, preset: str = "small", router: Any = None,
    call_budget: float | None = None, steps: Steps | None = None, retrieval_only: bool | None = None,
) -> dict[str, dict[str, float]]:  # fmt: skip
    """What each named contender is expected to spend on ``data``'s questions, before any
    LLM call (only retrievals run): ``{name: {"calls": per question, "calls_max": ...,
    "input_tokens": per question}}``. Calls are :func:`estimate_calls`' priors, or a
    fitted router's means; AdaptiveRAG's are routed before the answer on each question's
    retrieval (``calls``: no escalation after the answer, ``calls_max``: the costliest one
    within the budget). Input tokens are estimated from the plain answer prompt with the
    retrieved documents (four characters a token) times the calls, the calls of a
    strategy's ranking by its ``ranking_prompt``. ``rag``: the backend, else the index in
    ``index``, else ``corpus`` (or the data's own) indexed lexically, nothing embedded
    (:func:`dry_run_backend`, which says what the estimate rests on).
    ``steps`` (a :class:`~selfrag_core.progress.Progress`) shows the indexing and the
    questions' retrievals as they go.

    A retrieval-only run (``retrieval_only``; None: as ``evaluate`` decides, when the data
    has relevance judgements but no answers) ranks documents instead of answering, and so
    does its dry run, which searches nothing: each contender costs its ranking's
    ``ranking_calls()`` and their ``ranking_prompt`` tokens (plain's one search none), and
    one that cannot rank (its ``ranking()`` None) is left out of the result, as the run
    leaves it out."""
    ranking = ranks_only(data, retrieval_only)
    if rag is None and ranking:
        rag = _NoSearch()
    elif rag is None:
        rag, _ = dry_run_backend(data, names, corpus=corpus, index=index, embed=embed, steps=steps)
    no_llm = _NoLLM()
    strategies = {
        n: build_strategy(n, rag, no_llm, top_k=top_k, preset=preset, router=router, call_budget=call_budget)
        for n in names
    }
    if ranking:
        strategies = {n: s for n, s in strategies.items() if s.ranking() is not None}
    totals: dict[str, dict[str, float]] = {
        n: {"calls": 0.0, "calls_max": 0.0, "input_tokens": 0.0} for n in strategies
    }
    # build_strategy sizes every built-in strategy to search top_k deep (None: the profile's, at most 5)
    k = top_k or DEFAULT_TOP_K
    with step(steps, "dry run", len(data.questions), "questions") as advance:
        for question in data.questions:
            text = question.question
            docs = [] if ranking else run_sync(retrieve_or_empty(rag, text, k), Run(ExecutionConfig()))
            for n, strategy in strategies.items():
                low, high = (strategy.ranking_calls(),) * 2 if ranking else _expected(strategy, text, docs)
                totals[n]["calls"] += low
                totals[n]["calls_max"] += high
                totals[n]["input_tokens"] += _input_tokens(strategy, text, docs, low)
            advance(1)
    count = max(len(data.questions), 1)
    return {n: {k: round(v / count, 2) for k, v in t.items()} for n, t in totals.items()}


def _input_tokens(strategy: Any, question: str, docs: list[Any], calls: float) -> float:
    """The input tokens (four characters a token) of ``calls`` LLM calls of ``strategy`` on
    ``question``: those of its ranking (``ranking_calls()``) by their ``ranking_prompt``,
    every other call counted as the answer prompt over ``docs``."""
    passages = min(strategy.ranking_calls(), calls)
    chars = passages * len(strategy.ranking_prompt(question)) if passages else 0.0
    if calls > passages:
        lang = detect_language(question)
        answer = strategy.prompts.render(
            "grounded_answer", lang, context=format_context(docs), question=question
        )
        chars += (calls - passages) * len(answer)
    return chars / 4


def _expected(strategy: Any, question: str, docs: list[Any]) -> tuple[float, float]:
    """(expected, at most) LLM calls of ``strategy`` on ``question``."""
    if not isinstance(strategy, AdaptiveRAG):
        calls = estimate_calls(strategy, question)
        return calls, calls
    signals = route_signals(question, docs)
    candidates, _ = strategy.candidates(BEFORE_ANSWER, signals, question)
    decision = strategy.router.route(BEFORE_ANSWER, signals, candidates)
    if decision.choice is not None:
        calls = next(c.calls for c in candidates if c.name == decision.choice)
        return calls, calls
    after, _ = strategy.candidates(AFTER_ANSWER, signals, question)
    return 1.0, max([1.0, *(c.calls for c in after)])
