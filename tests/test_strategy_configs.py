"""One configuration style (issue 31): every strategy takes one frozen, validated config;
the specification's keyword names build it; a query's context overrides it by name; and
HyDE's passages go out under the one concurrency limit (issue 33)."""

from __future__ import annotations

import dataclasses
import re
import time
import warnings
from typing import Any

import pytest
from test_profiles import CONFIGS  # every strategy's config

from selfrag_core import presets
from selfrag_core.config import (
    AdaptiveRAGConfig,
    ExecutionConfig,
    HyDERAGConfig,
    PlainRAGConfig,
    RecursiveRAGConfig,
    SelfHealingRAGConfig,
    SelfRAGConfig,
    StrategyConfig,
)
from selfrag_core.errors import ConfigurationError
from selfrag_core.strategies import (
    AdaptiveRAG,
    HyDERAG,
    PlainRAG,
    RecursiveRAG,
    SelfHealingRAG,
    SelfIRAG,
    Strategy,
)
from selfrag_core.testing import FakeLLM, FakeRetriever, judge_json

DOCS = [
    "Honeybees dance to show other bees the way to flowers.",
    "Bees swarm when a colony grows too large.",
    "The waggle dance of honeybees encodes the direction of food.",
    "Honeybees live in hives of many thousand bees.",
]
QUESTION = "Why do honeybees dance?"
PASSAGE = "Honeybees perform a waggle dance that tells other bees where the flowers are."
INSTANT = ExecutionConfig(sleep=lambda _: None)


def _script(prompt: str) -> str:
    if prompt.startswith("Write a passage"):
        return PASSAGE
    if "Judge the answer" in prompt:
        return judge_json(answer="Honeybees dance to show the way to flowers.", score=6)
    if prompt.startswith("Split the answer"):
        return '{"claims": [{"claim": "bees dance", "supported": true}]}'
    return "Honeybees dance to show the way to flowers [1]."


# ----------------------------------------------------------------------------- the configs


@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_is_frozen_validated_and_names_top_k(config: type[StrategyConfig]) -> None:
    made = config()
    assert "top_k" in made.names() and made.top_k == 5  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.top_k = 3  # type: ignore[attr-defined,misc]
    with pytest.raises(ConfigurationError, match="top_k must be >= 1, got 0"):
        config(top_k=0)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match=f"{config.__name__} has no setting k; its settings are"):
        made.replace(k=3)
    assert made.replace(top_k=2).top_k == 2  # type: ignore[attr-defined]


def test_no_synonyms_remain_one_name_per_setting() -> None:
    names = set().union(*(c.names() for c in CONFIGS))
    assert not names & {"k", "retrieval_top_k", "quality_threshold", "max_workers"}
    assert {"confidence_threshold"} <= SelfRAGConfig.names() & SelfHealingRAGConfig.names()


@pytest.mark.parametrize(
    ("config", "changes", "message"),
    [
        (HyDERAGConfig, {"num_hypothetical_docs": 0}, "num_hypothetical_docs must be >= 1"),
        (HyDERAGConfig, {"max_final_docs": 0}, "max_final_docs must be >= 1"),
        (PlainRAGConfig, {"llm_retries": -1}, "llm_retries must be >= 0"),
        (SelfHealingRAGConfig, {"confidence_threshold": 1.5}, "confidence_threshold"),
        (SelfHealingRAGConfig, {"evidence_weight": -0.1}, "evidence_weight"),
        (SelfHealingRAGConfig, {"max_retries": -1}, "max_retries must be >= 0"),
    ],
)
def test_a_bad_setting_names_itself(
    config: type[StrategyConfig], changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        config(**changes)


def test_a_system_prompt_must_be_text() -> None:
    with pytest.raises(TypeError, match="system_prompt must be a str"):
        SelfHealingRAGConfig(system_prompt=3)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the constructors


def _no_warning(build: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return build()


def test_the_specifications_hyde_arguments_build_the_config_without_a_warning() -> None:
    rag, llm = FakeRetriever(list(DOCS)), FakeLLM(_script)
    positional = _no_warning(lambda: HyDERAG(rag, llm, 4, False, 7, 12, 1))
    assert positional.config == HyDERAGConfig(4, False, 7, 12, 1)
    keywords = _no_warning(
        lambda: HyDERAG(rag_system=rag, llm=llm, num_hypothetical_docs=4, top_k=7, max_final_docs=12)
    )
    assert keywords.config == HyDERAGConfig(num_hypothetical_docs=4, top_k=7, max_final_docs=12)


MAX_WORKERS = r"HyDERAG\(max_workers=\.\.\.\) is deprecated; pass execution=ExecutionConfig\(max_concurrency="


def test_max_workers_is_a_deprecated_name_of_the_concurrency_limit() -> None:
    rag, llm = FakeRetriever(list(DOCS)), FakeLLM(_script)
    with pytest.warns(DeprecationWarning, match=MAX_WORKERS) as caught:
        positional = HyDERAG(rag, llm, 4, False, 7, 12, 1, 2)
    assert caught[0].filename == __file__  # the caller's line
    assert positional.config == HyDERAGConfig(4, False, 7, 12, 1)
    assert positional.execution.max_concurrency == 2  # max_workers: the one limit
    # an execution given explicitly wins over max_workers
    with pytest.warns(DeprecationWarning, match=MAX_WORKERS):
        explicit = HyDERAG(rag, llm, max_workers=2, execution=ExecutionConfig(max_concurrency=6))
    assert explicit.execution.max_concurrency == 6


def test_the_specifications_healing_keywords_build_the_config_the_synonyms_deprecated() -> None:
    rag, llm = FakeRetriever(list(DOCS)), FakeLLM(_script)
    canonical = _no_warning(lambda: SelfHealingRAG(llm, [rag], max_retries=1, system_prompt="Be brief."))
    assert canonical.config == SelfHealingRAGConfig(max_retries=1, system_prompt="Be brief.")
    for name, value, setting in (
        ("quality_threshold", 0.9, "confidence_threshold"),
        ("retrieval_top_k", 2, "top_k"),
    ):
        replacement = rf"pass config=SelfHealingRAGConfig\({setting}=\.\.\.\)"
        with pytest.warns(
            DeprecationWarning, match=rf"SelfHealingRAG\({name}=\.\.\.\) is deprecated; {replacement}"
        ):
            healing = SelfHealingRAG(llm, [rag], max_retries=1, **{name: value})
        assert healing.config == SelfHealingRAGConfig(max_retries=1, **{setting: value})


@pytest.mark.parametrize(
    ("build", "name", "expected"),
    [
        (lambda r, m: PlainRAG(r, m, top_k=2), "PlainRAG(top_k=...)", PlainRAGConfig(top_k=2)),
        (
            lambda r, m: PlainRAG(r, m, llm_retries=0),
            "PlainRAG(llm_retries=...)",
            PlainRAGConfig(llm_retries=0),
        ),
        (lambda r, m: AdaptiveRAG(r, m, top_k=2), "AdaptiveRAG(top_k=...)", AdaptiveRAGConfig(top_k=2)),
        (
            lambda r, m: SelfHealingRAG(m, [r], evidence_weight=0.0),
            "SelfHealingRAG(evidence_weight=...)",
            SelfHealingRAGConfig(evidence_weight=0.0),
        ),
    ],
)
def test_other_keywords_still_build_the_config_deprecated(build: Any, name: str, expected: Any) -> None:
    rag, llm = FakeRetriever(list(DOCS)), FakeLLM(_script)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{name} is deprecated")):
        strategy = build(rag, llm)
    assert strategy.config == expected


def test_keywords_apply_on_top_of_a_config_and_a_wrong_config_type_is_refused() -> None:
    rag, llm = FakeRetriever(list(DOCS)), FakeLLM(_script)
    hyde = HyDERAG(rag, llm, top_k=2, config=HyDERAGConfig(num_hypothetical_docs=1))
    assert hyde.config == HyDERAGConfig(num_hypothetical_docs=1, top_k=2)
    with pytest.raises(TypeError, match="config must be a PlainRAGConfig, got SelfRAGConfig"):
        PlainRAG(rag, llm, SelfRAGConfig())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config must be a SelfHealingRAGConfig"):
        SelfHealingRAG(llm, [rag], config=HyDERAGConfig())  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- per-call overrides


def _built(name: str) -> tuple[Strategy[Any], FakeLLM]:
    llm = FakeLLM(_script)
    strategy = presets.build_strategy(name, FakeRetriever(list(DOCS)), llm, preset="standard", top_k=None)
    return strategy, llm


@pytest.mark.parametrize("name", [presets.BASELINE, *presets.STRATEGIES, presets.ADAPTIVE])
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_context_top_k_sets_every_search_of_the_call(name: str, mode: str) -> None:
    strategy, _ = _built(name)
    before = strategy.config
    context = {"top_k": 1}
    result = strategy.query(QUESTION, context) if mode == "sync" else await strategy.aquery(QUESTION, context)
    searches = [e.detail.get("top_k") for e in result.trace.events if e.kind == "retrieval"]
    if name == "healing":  # the override sets its own searches; a strategy it tries keeps its own
        assert searches[0] == 1
    else:
        assert searches and set(searches) == {1}
    assert strategy.config is before and strategy.config.top_k == 5  # the shared instance is untouched
    plain = strategy.query(QUESTION)
    assert {e.detail.get("top_k") for e in plain.trace.events if e.kind == "retrieval"} == {5}


def test_a_context_overrides_any_setting_by_its_name() -> None:
    hyde, llm = _built("hyde")
    hyde.query(QUESTION, {"num_hypothetical_docs": 2})
    assert sum(p.startswith("Write a passage") for p in llm.prompts) == 2
    self_rag, _ = _built("self")
    assert self_rag.query(QUESTION, {"max_refinement_iterations": 1}).iterations == 1
    healing, llm = _built("healing")
    report = healing.query(QUESTION, {"confidence_threshold": 0.0, "max_retries": 0})
    assert (report.attempts, report.threshold) == (1, 0.0)
    recursive, llm = _built("recursive")
    result = recursive.query(
        "How do bees dance and why do bees swarm when colonies grow large?", {"max_depth": 0}
    )
    assert not result.decomposed and llm.n_calls == 1


@pytest.mark.parametrize("name", [presets.BASELINE, *presets.STRATEGIES, presets.ADAPTIVE])
def test_a_bad_override_raises_before_anything_runs(name: str) -> None:
    strategy, llm = _built(name)
    with pytest.raises(ConfigurationError, match="top_k must be >= 1, got 0"):
        strategy.query(QUESTION, {"top_k": 0})
    assert llm.n_calls == 0


def test_context_entries_that_name_no_setting_are_left_alone() -> None:
    plain, _ = _built("plain")
    assert plain.for_call({"metadata_filter": {"lang": "en"}, "memory": None}) is plain
    assert plain.for_call({"top_k": None}) is plain
    assert plain.for_call({"top_k": 2}).config == PlainRAGConfig(top_k=2)


def test_the_server_passes_its_options_as_the_same_settings() -> None:
    pytest.importorskip("pydantic")
    from selfrag_core.serve.execution import UnsupportedOptionError, check_settings, request_settings
    from selfrag_core.serve.models import QueryRequest

    request = QueryRequest(question="q", top_k=2, max_refinement_iterations=1, confidence_threshold=0.5)
    settings = request_settings(request)
    assert settings == {"top_k": 2, "max_refinement_iterations": 1, "confidence_threshold": 0.5}
    old_names = QueryRequest(question="q", top_k=2, max_iterations=1, threshold=0.5)  # (deprecated)
    assert request_settings(old_names) == settings
    assert request_settings(QueryRequest(question="q", max_llm_calls=3)) == {}  # a limit, no setting
    self_rag, _ = _built("self")
    check_settings(self_rag, settings)
    hyde, _ = _built("hyde")
    with pytest.raises(
        UnsupportedOptionError, match="option 'max_refinement_iterations' does not apply to Hy"
    ):
        check_settings(hyde, settings)

    class Mine(Strategy[Any]):
        pass

    with pytest.raises(UnsupportedOptionError, match="option 'top_k' does not apply to Mine"):
        check_settings(Mine(FakeRetriever([]), FakeLLM("x")), {"top_k": 2})


# ----------------------------------------------------------------------------- HyDE's concurrency


#: seconds each scripted LLM call takes: a query's wall time counts its dependent rounds
LATENCY = 0.3


def _passages_llm() -> FakeLLM:
    return FakeLLM({"Write a passage": PASSAGE}, default="Honeybees dance [1].", latency=LATENCY)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_hyde_with_eight_passages_takes_two_rounds_by_default(mode: str) -> None:
    llm = _passages_llm()
    hyde = HyDERAG(FakeRetriever(list(DOCS)), llm, config=HyDERAGConfig(num_hypothetical_docs=8))
    assert hyde.execution.max_concurrency == ExecutionConfig().max_concurrency == 8
    start = time.perf_counter()
    result = hyde.query(QUESTION) if mode == "sync" else await hyde.aquery(QUESTION)
    elapsed = time.perf_counter() - start
    assert llm.n_calls == 9 and llm.rounds() == 2 and len(result.hypothetical_docs) == 8
    assert elapsed < 2.8 * LATENCY, f"{elapsed:.2f}s: three rounds would take {3 * LATENCY:.1f}s"


def test_hyde_built_by_the_factory_with_eight_passages_takes_two_rounds() -> None:
    llm = _passages_llm()
    hyde = presets.build_strategy("hyde", FakeRetriever(list(DOCS)), llm, preset="standard")
    start = time.perf_counter()
    hyde.query(QUESTION, {"num_hypothetical_docs": 8})
    assert time.perf_counter() - start < 2.8 * LATENCY
    assert llm.n_calls == 9 and llm.rounds() == 2


def test_max_concurrency_is_the_one_concurrency_limit() -> None:
    llm = _passages_llm()
    hyde = HyDERAG(FakeRetriever(list(DOCS)), llm, 8, execution=ExecutionConfig(max_concurrency=4))
    start = time.perf_counter()
    hyde.query(QUESTION)
    # two rounds of four passages, then the answer: never faster than three latencies
    assert time.perf_counter() - start >= 3 * LATENCY and llm.n_calls == 9


def test_recursive_and_self_rag_take_their_configs_as_before() -> None:
    rag, llm = FakeRetriever(list(DOCS)), FakeLLM(_script)
    assert SelfIRAG(rag, llm).config == SelfRAGConfig()
    assert RecursiveRAG(rag, llm, RecursiveRAGConfig(max_depth=1)).config.max_depth == 1
    with pytest.raises(TypeError, match="config must be a SelfRAGConfig"):
        SelfIRAG(rag, llm, PlainRAGConfig())  # type: ignore[arg-type]


def test_the_adapters_pass_a_per_call_top_k_through_the_context() -> None:
    selfrag_langchain = pytest.importorskip("selfrag_langchain")
    strategy, _ = _built("plain")
    runnable = selfrag_langchain.SelfRAGRunnable(strategy=strategy)
    out = runnable.invoke({"question": QUESTION, "context": {"top_k": 1}})
    assert len(out["sources"]) == 1
    assert len(runnable.invoke({"question": QUESTION})["sources"]) > 1
