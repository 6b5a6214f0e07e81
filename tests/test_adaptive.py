"""AdaptiveRAG with scripted models: the default rules, the budget knob, the drivers,
composition, fallbacks, the factory, the CLI and the adapters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import (
    AdaptiveRAG,
    AdaptiveRAGConfig,
    Answer,
    ComparisonRule,
    ExecutionConfig,
    PlainRAG,
    RecursiveRAG,
    SelfHealingRAG,
    Strategy,
)
from selfrag_core.errors import ConfigurationError, LLMCallError
from selfrag_core.presets import build_strategy
from selfrag_core.strategies.adaptive import (
    AFTER_ANSWER,
    BEFORE_ANSWER,
    RuleRouter,
    estimate_calls,
    route_signals,
)
from selfrag_core.testing import FakeLLM, FakeRetriever, first_document, prompt_documents

DOCS = [
    "Paris is the capital of France.",
    "Berlin is the capital of Germany.",
    "Volcanoes erupt when gas pressure drives magma up.",
]
SUPPORTED = "What is the capital of France?"
MULTI = "What is the capital of France, and why do volcanoes erupt?"
UNSUPPORTED = "Why do volcanoes erupt under pressure?"  # the scripted model invents its answer
QUESTIONS = [SUPPORTED, MULTI, UNSUPPORTED, "What is the capital of Germany?", "Why does magma erupt?"]
INSTANT = ExecutionConfig(sleep=lambda s: None)


def scripted(prompt: str) -> str:
    """Answers from its first document, except about volcanoes' pressure: an invention."""
    if "under pressure" in prompt:
        return "Bananas are blue and sing at night."
    return first_document(prompt, "Not in the context.")


@pytest.fixture
def rag() -> FakeRetriever:
    return FakeRetriever(list(DOCS))


def answer_tokens(events: list[Any]) -> str:
    """The streamed tokens after the last reset: the answer."""
    text: list[str] = []
    for event in events:
        if event.kind == "reset":
            text = []
        elif event.kind == "token":
            text.append(event.text)
    return "".join(text)


def notes(result: Any) -> list[dict[str, Any]]:
    return [e.detail for e in result.trace.events if e.name == "route"]


def test_the_default_rules_decompose_escalate_or_stop(rag: FakeRetriever) -> None:
    strategy = AdaptiveRAG(rag, FakeLLM(scripted), top_k=2, execution=INSTANT)

    kept = strategy.query(SUPPORTED)
    assert kept.answer == "Paris is the capital of France." and kept.details["strategy"] == "plain"
    assert [(n["stage"], n["choice"]) for n in notes(kept)] == [
        (BEFORE_ANSWER, "plain"),
        (AFTER_ANSWER, "plain"),
    ]
    assert kept.trace.llm_calls == 1
    assert notes(kept)[1]["signals"]["answer_supported"] == 1.0
    assert notes(kept)[1]["expected_gain"] == {}  # rules estimate no gain: unknown, not zero

    split = strategy.query(MULTI)
    assert split.details == {"strategy": "recursive", "stage": BEFORE_ANSWER}
    assert "Paris" in split.answer and "Volcanoes erupt" in split.answer
    assert notes(split)[0]["reason"] == "the question has 2 parts: decompose it"
    assert notes(split)[0]["expected_gain"] == {"recursive": None}

    repaired = strategy.query(UNSUPPORTED)
    decision = notes(repaired)[1]
    assert decision["choice"] == "healing" and "do not support" in decision["reason"]
    assert decision["signals"]["answer_supported"] == 0.0
    assert repaired.details["strategy"] in ("healing", "plain")  # healing's answer, or plain's when it failed


def test_nothing_retrieved_is_never_escalated() -> None:
    strategy = AdaptiveRAG(FakeRetriever([]), FakeLLM(scripted), execution=INSTANT)
    result = strategy.query("What is a quasar?")
    assert result.answer == "There is not enough information." and result.trace.llm_calls == 0
    assert notes(result)[1]["reason"].startswith("nothing was retrieved")


def test_the_call_budget_lowers_the_mean_calls_monotonically(rag: FakeRetriever) -> None:
    means = []
    for budget in (None, 6.0, 4.5, 3.0, 2.0, 1.0):
        strategy = AdaptiveRAG(rag, FakeLLM(scripted), top_k=2, call_budget=budget, execution=INSTANT)
        results = [strategy.query(q) for q in QUESTIONS]
        calls = [r.trace.llm_calls for r in results]
        if budget is not None:
            assert max(calls) <= budget + 0.999  # the engine's budget enforces its ceiling
            assert all(n["call_budget"] == budget for r in results for n in notes(r))
        means.append(sum(calls) / len(calls))
    assert means == sorted(means, reverse=True), means
    assert means[0] > means[-1] == 1.0  # at one call a question: plain everywhere


def test_the_budget_caps_the_engines_budget_and_is_checked(rag: FakeRetriever) -> None:
    llm = FakeLLM(scripted)
    capped = AdaptiveRAG(rag, llm, call_budget=2.5, execution=ExecutionConfig(max_llm_calls=12))
    assert capped.execution.max_llm_calls == 3
    assert (
        AdaptiveRAG(
            rag, llm, call_budget=4, execution=ExecutionConfig(max_llm_calls=2)
        ).execution.max_llm_calls
        == 2
    )
    with pytest.raises(ValueError, match="at least 1"):
        AdaptiveRAG(rag, llm, call_budget=0.5)
    with pytest.raises(TypeError, match="call_budget"):
        AdaptiveRAG(rag, llm, call_budget="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="other than 'plain'"):
        AdaptiveRAG(rag, llm, strategies={"plain": PlainRAG(rag, llm)})


def test_a_decision_over_budget_is_named_in_the_trace(rag: FakeRetriever) -> None:
    result = AdaptiveRAG(rag, FakeLLM(scripted), top_k=2, call_budget=1, execution=INSTANT).query(MULTI)
    first = notes(result)[0]
    assert first["choice"] == "plain" and "recursive" in first["over_budget"]
    assert result.trace.llm_calls == 1


async def test_sync_async_and_streamed_agree(rag: FakeRetriever) -> None:
    strategy = AdaptiveRAG(rag, FakeLLM(scripted), top_k=2, execution=INSTANT)
    for question in (SUPPORTED, MULTI):
        sync = strategy.query(question)
        later = await strategy.aquery(question)
        events = list(strategy.stream(question))
        streamed = events[-1].result
        tokens = answer_tokens(events)
        async_events = [e async for e in strategy.astream(question)]
        assert sync.answer == later.answer == streamed.answer == async_events[-1].result.answer
        assert tokens.strip() == sync.answer.strip()
        assert [n["choice"] for n in notes(sync)] == [n["choice"] for n in notes(later)]


def test_an_escalation_that_fails_keeps_the_plain_answer(rag: FakeRetriever) -> None:
    class Broken(Strategy[Answer]):
        def _plan(self, query: str, context: dict[str, Any]) -> Any:
            raise LLMCallError("the model is down")
            yield  # a plan

    strategy = AdaptiveRAG(rag, FakeLLM(scripted), strategies={"broken": Broken(rag, FakeLLM())}, top_k=2)
    result = strategy.query(UNSUPPORTED)
    assert result.details["strategy"] == "plain" and result.answer == "Bananas are blue and sing at night."
    failed = [e for e in result.trace.fallbacks if e.name == "escalation_failed"]
    assert failed and failed[0].detail == {"strategy": "broken", "then": "keep the first answer"}


def test_it_composes_inside_other_strategies(rag: FakeRetriever) -> None:
    llm = FakeLLM(scripted)
    adaptive = AdaptiveRAG(rag, llm, top_k=2, execution=INSTANT)
    leafy = RecursiveRAG(rag, llm, leaf=adaptive)
    assert "Paris" in leafy.query(SUPPORTED).answer
    healer = SelfHealingRAG(llm, [adaptive], evidence_weight=1.0, execution=INSTANT)
    report = healer.query(SUPPORTED)
    assert report.strategy == "AdaptiveRAG" and "Paris" in report.answer
    assert any(e.name == "route" for e in report.trace.events)  # one trace for the whole tree


def test_a_router_of_your_own_is_asked_with_the_candidates_within_budget(rag: FakeRetriever) -> None:
    asked: list[tuple[str, list[str]]] = []

    class Always:
        def route(self, stage: str, signals: Any, candidates: Any) -> Any:
            asked.append((stage, [c.name for c in candidates]))
            return RuleRouter().route(stage, signals, candidates)

    AdaptiveRAG(rag, FakeLLM(scripted), router=Always(), call_budget=2.0, top_k=2).query(SUPPORTED)
    assert asked == [(BEFORE_ANSWER, ["recursive", "self"]), (AFTER_ANSWER, ["recursive"])]


def test_the_signals_read_the_question_the_retrieval_and_the_answer(rag: FakeRetriever) -> None:
    docs = rag.retrieve("Were Scott Derrickson and Ed Wood of the same nationality?", 2)
    before = route_signals("Were Scott Derrickson and Ed Wood of the same nationality?", docs)
    assert before["comparison"] == 1.0 and before["entities"] == 2.0 and before["multi_part"] == 0.0
    assert "answer_supported" not in before
    docs = rag.retrieve(MULTI, 3)
    after = route_signals(MULTI, docs, "Paris is the capital of France.")
    assert after["multi_part"] == 1.0 and after["parts"] == 2.0 and after["missing_parts"] == 1.0
    assert after["top_score"] >= after["score_margin"] >= 0.0 and after["answer_supported"] == 1.0
    assert estimate_calls(PlainRAG(rag, FakeLLM()), MULTI) == 1.0


def test_the_factory_builds_it_with_the_presets_candidates(rag: FakeRetriever, tmp_path: Path) -> None:
    built = build_strategy("adaptive", rag, FakeLLM(scripted), call_budget=3)
    assert isinstance(built, AdaptiveRAG) and set(built.strategies) == {
        "self",
        "hyde",
        "recursive",
        "healing",
    }
    assert built.execution.max_llm_calls == 3 and isinstance(built.router, RuleRouter)
    assert isinstance(build_strategy("plain", rag, FakeLLM(), router="ignored.json"), PlainRAG)
    with pytest.raises(ConfigurationError, match="cannot read the router"):
        build_strategy("adaptive", rag, FakeLLM(), router=str(tmp_path / "missing.json"))


def test_the_cli_asks_with_adaptive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("bm25s")
    from selfrag_core import cli

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "volcano.txt").write_text("Volcanoes erupt when gas pressure breaks the rock.\n")
    index = ["--index", str(tmp_path / "index")]
    assert cli.main(["index", str(docs), *index, "--embedder", "hashing"]) == 0
    capsys.readouterr()
    ask = ["ask", "Why do volcanoes erupt?", *index, "--llm", "fake", "--strategy", "adaptive", "--json"]
    assert cli.main([*ask, "--call-budget", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["strategy"] in ("plain", "self", "hyde", "recursive", "healing")
    assert any(e["name"] == "route" for e in result["trace"]["events"])
    code = cli.main(["ask", "Why?", *index, "--llm", "fake", "--strategy", "self", "--call-budget", "2"])
    assert code == 2 and "--strategy adaptive" in capsys.readouterr().err


def test_through_the_langchain_adapter(rag: FakeRetriever) -> None:
    pytest.importorskip("langchain_core")
    selfrag_langchain = pytest.importorskip("selfrag_langchain")
    runnable = selfrag_langchain.SelfRAGRunnable(strategy=AdaptiveRAG(rag, FakeLLM(scripted), top_k=2))
    assert runnable.invoke(SUPPORTED)["answer"] == "Paris is the capital of France."


def test_through_the_llamaindex_adapter(rag: FakeRetriever) -> None:
    pytest.importorskip("llama_index.core")
    selfrag_llamaindex = pytest.importorskip("selfrag_llamaindex")
    engine = selfrag_llamaindex.SelfRAGQueryEngine(strategy=AdaptiveRAG(rag, FakeLLM(scripted), top_k=2))
    assert str(engine.query(SUPPORTED)) == "Paris is the capital of France."


def test_a_comparison_by_date_goes_to_recursive_before_any_answer() -> None:
    passages = [
        "Samantha Cristoforetti\nSamantha Cristoforetti (born 26 April 1977) is an Italian astronaut.",
        "Jean-Loup Chrétien\nJean-Loup Chrétien (born 20 August 1938) is a French general.",
    ]
    llm = FakeLLM("Samantha Cristoforetti was born first.")
    question = "Who was born first, Samantha Cristoforetti or Jean-Loup Chrétien?"
    strategy = AdaptiveRAG(FakeRetriever(passages), llm, top_k=1, execution=INSTANT)
    result = strategy.query(question)
    first = notes(result)[0]
    assert (first["stage"], first["choice"]) == (BEFORE_ANSWER, "recursive")
    assert first["signals"]["dated_comparison"] == 1.0
    assert result.answer == "Samantha Cristoforetti was born first."  # no rule replaces it by default
    assert result.trace.llm_calls == 1
    # with the comparison rule chosen, the candidates' final check replaces the wrong pick
    config = AdaptiveRAGConfig(top_k=1, rules=(ComparisonRule(),))
    ruled = AdaptiveRAG(FakeRetriever(passages), llm, config, execution=INSTANT)
    assert ruled.query(question).answer.startswith("Jean-Loup Chrétien: 1938 [")


def test_drafts_go_on_from_the_plain_answer_instead_of_writing_it_again() -> None:
    from selfrag_core import AdaptiveRAGConfig, DraftsRAG, DraftsRAGConfig

    class After:
        def route(self, stage: str, signals: Any, candidates: Any) -> Any:
            if stage == BEFORE_ANSWER:
                return RuleRouter().route(stage, signals, [])
            asked.extend((c.name, c.calls, c.extra) for c in candidates)
            return RuleRouter._to(candidates[0], "always")

    def invents(prompt: str) -> str:  # over all three documents, an invention; over one, a copy of it
        return "Bananas are blue." if len(prompt_documents(prompt)) > 1 else first_document(prompt, "")

    rag = FakeRetriever(["Paris is the capital of France.", "France is a country.", "The capital is large."])
    asked: list[tuple[str, float, float]] = []
    llm = FakeLLM(invents)
    drafts = DraftsRAG(rag, llm, DraftsRAGConfig(top_k=3))
    alone = DraftsRAG(rag, FakeLLM(invents), DraftsRAGConfig(top_k=3)).query(SUPPORTED)
    config = AdaptiveRAGConfig(top_k=3)
    result = AdaptiveRAG(rag, llm, config, strategies={"drafts": drafts}, router=After()).query(SUPPORTED)
    assert result.answer == alone.answer == "Paris is the capital of France."
    assert llm.n_calls == 3 and result.details["strategy"] == "drafts"  # the plain answer, two drafts
    assert asked == [("drafts", 3.0, 2.0)]  # costed as drafts' calls, the plain answer among them
    asked.clear()
    other = DraftsRAG(rag, llm, DraftsRAGConfig(top_k=2))  # other documents: it answers afresh
    AdaptiveRAG(rag, llm, config, strategies={"drafts": other}, router=After()).query(SUPPORTED)
    assert llm.n_calls == 3 + 1 + 3 and asked == [("drafts", 4.0, 3.0)]
