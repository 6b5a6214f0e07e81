"""Fitting AdaptiveRAG's router on an evaluation's per-question results (scripted models)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import (
    AdaptiveRAG,
    AdaptiveRAGConfig,
    Answer,
    PlainRAG,
    PlainRAGConfig,
    RecursiveRAG,
    RecursiveRAGConfig,
    Strategy,
)
from selfrag_core.engine import Generate
from selfrag_core.errors import ConfigurationError
from selfrag_core.evaluation import EvalData, EvalQuestion, EvalSettings, evaluate
from selfrag_core.evaluation.router import ROUTED, dry_run, fit_router
from selfrag_core.strategies.adaptive import FittedRouter, load_router
from selfrag_core.testing import FakeLLM, FakeRetriever, first_document

COUNTRIES = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Japan", "Tokyo"),
    ("Egypt", "Cairo"), ("Peru", "Lima"), ("Kenya", "Nairobi"), ("Chile", "Santiago"), ("Norway", "Oslo"),
    ("Cuba", "Havana"), ("Ghana", "Accra"), ("Nepal", "Kathmandu"), ("Fiji", "Suva"), ("Laos", "Vientiane"),
    ("Mali", "Bamako"),
]  # fmt: skip


def single(i: int) -> tuple[str, str]:
    country, capital = COUNTRIES[i % len(COUNTRIES)]
    return f"What is the capital of {country}?", capital


def multi(i: int) -> tuple[str, str]:
    (c1, k1), (c2, k2) = COUNTRIES[i % len(COUNTRIES)], COUNTRIES[(i + 5) % len(COUNTRIES)]
    return f"What is the capital of {c1}, and what is the capital of {c2}?", f"{k1} {k2}"


class Slow(Strategy[Answer]):
    """Two calls for plain's answer: it never helps, it only costs."""

    def _plan(self, query: str, context: dict[str, Any]) -> Any:
        docs = yield from PlainRAG(self.rag_system, self.llm, config=PlainRAGConfig(top_k=1)).plan(
            query, context
        )
        yield Generate(self.llm, "think again", "think")
        return docs


@pytest.fixture
def parts() -> tuple[FakeRetriever, FakeLLM]:
    rag = FakeRetriever([f"{capital} is the capital of {country}." for country, capital in COUNTRIES])
    # answers with the first word of its first document: one part of a two-part question
    return rag, FakeLLM(lambda prompt: first_document(prompt, "none").split()[0])


def contenders(rag: FakeRetriever, llm: FakeLLM) -> dict[str, Any]:
    split = RecursiveRAGConfig(max_depth=1, decomposition="rules", merge=False, top_k=1)
    return {
        "plain": PlainRAG(rag, llm, config=PlainRAGConfig(top_k=1)),
        "parts": RecursiveRAG(rag, llm, split),  # answers each part: better on multi-part questions only
        "slow": Slow(rag, llm),
    }


def data(n: int) -> EvalData:
    items = [EvalQuestion(f"s{i:02d}", *_pair(single(i))) for i in range(n)]
    items += [EvalQuestion(f"m{i:02d}", *_pair(multi(i))) for i in range(n)]
    return EvalData("capitals", items)


def _pair(qa: tuple[str, str]) -> tuple[str, tuple[str, ...]]:
    return qa[0], (qa[1],)


def route_notes(result: Any) -> list[dict[str, Any]]:
    return [e.detail for e in result.trace.events if e.name == "route"]


def test_a_strategy_that_helps_only_on_multi_part_questions_is_routed_to_on_those_alone(
    parts: tuple[FakeRetriever, FakeLLM], tmp_path: Path
) -> None:
    rag, llm = parts
    report = evaluate(data(16), contenders(rag, llm), settings=EvalSettings(output=tmp_path / "run"))
    plain_record = report.results[0]["plain"]  # type: ignore[index]
    assert set(plain_record["signals"]) >= {"multi_part", "top_score", "answer_supported"}

    fit = fit_router(report, holdout=0.25, seed=3)
    assert fit.metric == "f1" and fit.best == "parts"
    assert set(fit.router.strategies) == {"parts", "slow"}
    # on the held-out questions the router is as good as the best single strategy, never dearer
    routed, best = fit.rows[ROUTED], fit.rows["parts"]
    assert routed["quality"] == pytest.approx(best["quality"])  # type: ignore[arg-type]
    assert routed["calls"] <= best["calls"] < fit.rows["slow"]["calls"]  # type: ignore[operator]
    assert fit.comparisons["plain"]["verdict"] == "better"
    assert fit.routes.get("slow", 0) == 0 and fit.routes["parts"] == sum(
        q.startswith("m") for q in fit.held_out
    )

    path = fit.write(tmp_path / "router.json")
    candidates = {name: s for name, s in contenders(rag, llm).items() if name != "plain"}
    strategy = AdaptiveRAG(rag, llm, strategies=candidates, router=path, config=AdaptiveRAGConfig(top_k=1))
    for i in range(20, 24):  # questions of neither split
        chosen = strategy.query(multi(i)[0])
        assert chosen.details["strategy"] == "parts", route_notes(chosen)
        assert route_notes(chosen)[0]["stage"] == "before_answer"  # no plain answer paid for first
        assert chosen.trace.llm_calls == 2
        kept = strategy.query(single(i)[0])
        assert kept.details["strategy"] == "plain", route_notes(kept)
        assert [n["choice"] for n in route_notes(kept)] == ["plain", "plain"]
        assert kept.trace.llm_calls == 1
        decision = route_notes(kept)[1]
        assert decision["router"] == "FittedRouter" and set(decision["expected_gain"]) == {"parts", "slow"}
        assert decision["expected_gain"]["slow"] <= 0.0 and "signals" in decision


def test_the_gain_an_extra_call_must_buy_trades_calls_for_quality(
    parts: tuple[FakeRetriever, FakeLLM], tmp_path: Path
) -> None:
    """``min_gain_per_call`` (``--min-gain-per-call``) sets the mean calls a question: a
    dear call keeps every held-out question with plain, a free one sends the multi-part
    ones on; a negative one is refused."""
    from selfrag_core.cli.parser import build_parser

    rag, llm = parts
    report = evaluate(data(16), contenders(rag, llm))
    free = fit_router(report, holdout=0.25, seed=3, min_gain_per_call=0.0)
    dear = fit_router(report, holdout=0.25, seed=3, min_gain_per_call=10.0)
    assert dear.routes == {"plain": len(dear.held_out)} and dear.rows[ROUTED]["calls"] == 1.0
    assert free.rows[ROUTED]["calls"] > 1.0 and free.routes["parts"] > 0  # type: ignore[operator]
    written = json.loads(dear.write(tmp_path / "dear.json").read_text(encoding="utf-8"))
    assert written["min_gain_per_call"] == 10.0 and written["info"]["threshold"] == "given"
    with pytest.raises(ConfigurationError, match="min_gain_per_call must be a number >= 0"):
        fit_router(report, min_gain_per_call=-0.1)
    args = build_parser().parse_args(
        ["eval", "q.jsonl", "--fit-router", "r.json", "--min-gain-per-call", "0.05"]
    )
    assert args.min_gain_per_call == 0.05


def test_the_router_file_round_trips_and_the_summary_and_results_carry_what_was_fitted(
    parts: tuple[FakeRetriever, FakeLLM], tmp_path: Path
) -> None:
    rag, llm = parts
    evaluate(data(8), contenders(rag, llm), settings=EvalSettings(output=tmp_path / "run"))
    from_folder = fit_router(tmp_path / "run", holdout=0.25)  # a finished run's folder
    written = json.loads(from_folder.write(tmp_path / "r.json").read_text(encoding="utf-8"))
    assert written["schema"] == "selfrag.router/1"
    assert written["info"]["held_out"]["rows"][ROUTED]["quality"] is not None
    weights = written["strategies"]["parts"]["better"]["before_answer"]["signals"]
    assert set(weights["multi_part"]) == {"weight", "mean", "scale"}  # one named weight a signal
    loaded = load_router(tmp_path / "r.json")
    assert isinstance(loaded, FittedRouter)
    assert loaded.to_dict()["strategies"] == written["strategies"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json {", "not JSON"),
        ("[1, 2]", "must be an object"),
        ('{"schema": "selfrag.router/0", "metric": "f1", "strategies": {}}', "expected 'selfrag.router/1'"),
        ('{"schema": "selfrag.router/1", "metric": "f1", "strategies": {}}', "routes to nothing"),
        ("__import__('os').system('echo hacked')", "not JSON"),
    ],
)
def test_a_bad_router_file_is_a_configuration_error_naming_the_problem(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "router.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigurationError, match=message) as caught:
        load_router(path)
    assert "--fit-router" in str(caught.value)


def test_a_router_with_a_bad_number_or_an_unknown_signal_is_refused(
    parts: tuple[FakeRetriever, FakeLLM], tmp_path: Path
) -> None:
    rag, llm = parts
    fit = fit_router(evaluate(data(6), contenders(rag, llm)), holdout=0.25)
    good = fit.router.to_dict()
    model = good["strategies"]["parts"]["worse"]["after_answer"]
    model["signals"]["answer_supported"]["scale"] = 0.0
    with pytest.raises(ConfigurationError, match="scale must be positive"):
        load_router(good)
    model["signals"]["answer_supported"]["scale"] = 1.0
    model["signals"]["secret"] = {"weight": 1.0, "mean": 0.0, "scale": 1.0}
    with pytest.raises(ConfigurationError, match=r"unknown signals \['secret'\]"):
        load_router(good)
    del model["signals"]["secret"]
    good["strategies"]["parts"]["gain"] = float("nan")
    with pytest.raises(ConfigurationError, match=r"strategies\.parts\.gain must be a finite number"):
        load_router(good)
    missing = fit.router.to_dict()
    with pytest.raises(ConfigurationError, match=r"routes to \['parts', 'slow'\]"):
        AdaptiveRAG(rag, llm, strategies={"other": PlainRAG(rag, llm)}, router=missing)


def test_fitting_needs_the_baselines_signals(tmp_path: Path) -> None:
    questions = EvalData("q", [EvalQuestion(f"q{i}", f"Capital {i}?", ("x",)) for i in range(6)])
    report = evaluate(questions, {"plain": lambda q: "x", "other": lambda q: "y"})
    with pytest.raises(ConfigurationError, match="routing signals"):
        fit_router(report)


def test_a_dry_run_makes_no_llm_call(parts: tuple[FakeRetriever, FakeLLM]) -> None:
    rag, _ = parts
    expected = dry_run(data(3), ["plain", "hyde", "adaptive"], rag, top_k=1)
    assert expected["plain"]["calls"] == 1.0 and expected["hyde"]["calls"] == 2.0
    # multi-part questions go to RecursiveRAG (two parts, two calls) before any answer
    assert expected["adaptive"]["calls"] == pytest.approx(1.5)
    assert expected["adaptive"]["calls_max"] > expected["adaptive"]["calls"]
    assert all(e["input_tokens"] > 0 for e in expected.values())
    # HyDE's passage is asked for by its short prompt, not by the answer prompt over the documents
    plain, hyde = expected["plain"]["input_tokens"], expected["hyde"]["input_tokens"]
    assert plain < hyde < 2 * plain


def test_the_replay_costs_drafts_after_the_answer_at_its_own_calls() -> None:
    from selfrag_core.evaluation.router import _Question, continuing, routed
    from selfrag_core.strategies.adaptive import (
        AFTER_ANSWER,
        BEFORE_ANSWER,
        FittedRouter,
        Logistic,
        StrategyModel,
    )

    def constant(bias: float) -> Logistic:
        return Logistic((), (), (), (), bias)

    after_only = StrategyModel(
        {BEFORE_ANSWER: constant(-10.0), AFTER_ANSWER: constant(10.0)},
        {BEFORE_ANSWER: constant(-10.0), AFTER_ANSWER: constant(-10.0)},
        0.4,
        0.0,
        {"all": 3.0},
    )
    records = {
        "plain": {"metrics": {"f1": 0.1}, "llm_calls": 1},
        "drafts": {"metrics": {"f1": 0.5}, "llm_calls": 3},
        "self": {"metrics": {"f1": 0.5}, "llm_calls": 3},
    }
    question = _Question("q", {}, records)
    assert continuing(["plain", "drafts", "self"]) == {"drafts"}
    for name, calls in (("drafts", 3.0), ("self", 4.0)):  # self writes the plain answer again
        router = FittedRouter("f1", {name: after_only})
        assert routed(router, question, "plain", "f1")[:4] == (name, AFTER_ANSWER, 0.5, calls)
