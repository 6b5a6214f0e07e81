"""selfrag_core.profiles: model profiles, and the strategy sizes their configs take from them
(``Config.for_profile``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from selfrag_core import CAPABLE, SMALL_LOCAL, ModelProfile, presets, profile_of
from selfrag_core.config import (
    AdaptiveRAGConfig,
    HyDERAGConfig,
    PlainRAGConfig,
    RecursiveRAGConfig,
    SelfHealingRAGConfig,
    SelfRAGConfig,
    StrategyConfig,
)
from selfrag_core.errors import ConfigurationError
from selfrag_core.prompts import Prompts
from selfrag_core.strategies import HyDERAG, PlainRAG, RecursiveRAG, SelfHealingRAG, SelfIRAG
from selfrag_core.testing import FakeLLM, FakeRetriever


@pytest.fixture
def parts() -> tuple[FakeRetriever, FakeLLM]:
    return FakeRetriever([]), FakeLLM([])


# ----------------------------------------------------------------------------- the profile


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"context_window": 256}, ConfigurationError, "context_window must be >= 512, got 256"),
        ({"context_window": 2048.0}, ConfigurationError, "context_window must be an int"),
        ({"context_window": True}, ConfigurationError, "context_window must be an int"),
        ({"name": ""}, ConfigurationError, "name is empty"),
        ({"name": 7}, TypeError, "name must be a str"),
        ({"follows_json": "yes"}, TypeError, "follows_json must be True or False"),
        ({"deterministic": 1}, TypeError, "deterministic must be True or False"),
        ({"cites": None}, TypeError, "cites must be True or False"),
    ],
)
def test_a_bad_profile_says_what_to_pass(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        ModelProfile(**options)


def test_profiles_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CAPABLE.context_window = 1024  # type: ignore[misc]


CONFIGS: tuple[type[StrategyConfig], ...] = (
    PlainRAGConfig,
    SelfRAGConfig,
    HyDERAGConfig,
    RecursiveRAGConfig,
    SelfHealingRAGConfig,
    AdaptiveRAGConfig,
)


@pytest.mark.parametrize("config", CONFIGS)
def test_a_capable_model_keeps_the_specifications_defaults(config: type[StrategyConfig]) -> None:
    assert ModelProfile() == CAPABLE
    assert (CAPABLE.name, CAPABLE.context_window, CAPABLE.cites) == ("capable", 8192, True)
    assert not CAPABLE.small_context
    assert config.for_profile(CAPABLE) == config()


def test_a_small_local_model_gets_small_sizes() -> None:
    assert (SMALL_LOCAL.name, SMALL_LOCAL.context_window) == ("small", 2048)
    assert (SMALL_LOCAL.follows_json, SMALL_LOCAL.deterministic, SMALL_LOCAL.cites) == (False, True, False)
    assert SMALL_LOCAL.small_context
    assert PlainRAGConfig.for_profile(SMALL_LOCAL) == PlainRAGConfig(top_k=3, quotes=True)
    assert SelfRAGConfig.for_profile(SMALL_LOCAL) == SelfRAGConfig(
        top_k=3, fast_mode=False, max_refinement_iterations=2, stop_when_supported=True, drafts=2, quotes=True
    )
    assert HyDERAGConfig.for_profile(SMALL_LOCAL) == HyDERAGConfig(
        num_hypothetical_docs=1, top_k=3, max_final_docs=3, quotes=True
    )
    assert RecursiveRAGConfig.for_profile(SMALL_LOCAL) == RecursiveRAGConfig(
        top_k=3, max_depth=1, decomposition="rules", merge=False, quotes=True
    )
    assert SelfHealingRAGConfig.for_profile(SMALL_LOCAL) == SelfHealingRAGConfig(
        top_k=3, max_retries=1, quotes=True
    )
    assert not PlainRAGConfig.for_profile(CAPABLE).quotes  # a capable model's answer is its own


@pytest.mark.parametrize(("window", "top_k"), [(512, 3), (4095, 3), (4096, 5), (128_000, 5)])
@pytest.mark.parametrize("config", CONFIGS)
def test_top_k_follows_the_context_window(config: type[StrategyConfig], window: int, top_k: int) -> None:
    assert config.for_profile(ModelProfile(context_window=window)).top_k == top_k  # type: ignore[attr-defined]


def test_a_given_size_wins_over_the_profiles_and_what_follows_top_k_follows_it() -> None:
    assert SelfRAGConfig.for_profile(SMALL_LOCAL, top_k=7, fast_mode=True).fast_mode is True
    hyde = HyDERAGConfig.for_profile(SMALL_LOCAL, top_k=7)
    assert (hyde.top_k, hyde.max_final_docs) == (7, 7)  # a small window: no more fused than one search
    assert HyDERAGConfig.for_profile(CAPABLE, top_k=7).max_final_docs == 10
    assert HyDERAGConfig.for_profile(SMALL_LOCAL, top_k=None).top_k == 3  # None: the profile's
    with pytest.raises(ConfigurationError, match="PlainRAGConfig has no setting fast_mode"):
        PlainRAGConfig.for_profile(CAPABLE, fast_mode=True)
    with pytest.raises(TypeError, match="profile must be a ModelProfile"):
        PlainRAGConfig.for_profile("small")  # type: ignore[arg-type]


def test_only_deterministic_decoding_writes_one_hypothetical_document() -> None:
    assert HyDERAGConfig.for_profile(ModelProfile(deterministic=True)).num_hypothetical_docs == 1
    other = dataclasses.replace(SMALL_LOCAL, deterministic=False)
    assert HyDERAGConfig.for_profile(other).num_hypothetical_docs == 3


class _WithProfile:
    profile = SMALL_LOCAL


class _WithOtherProfile:
    profile = "small"


def test_profile_of_reads_the_llms_own_profile() -> None:
    assert profile_of(_WithProfile()) is SMALL_LOCAL
    assert profile_of(FakeLLM([])) is CAPABLE  # no profile attribute
    assert profile_of(_WithOtherProfile()) is CAPABLE  # not a ModelProfile
    assert profile_of(_WithOtherProfile(), default=SMALL_LOCAL) is SMALL_LOCAL
    assert profile_of(object(), SMALL_LOCAL) is SMALL_LOCAL


def test_the_local_llm_declares_the_small_local_profile() -> None:
    from selfrag_core.local.llm import LocalLLM

    # the profile depends on the sampling settings only: no model is loaded here
    llm = object.__new__(LocalLLM)
    llm._sampling = {"temperature": 0.0, "repeat_penalty": 1.1, "seed": 0}
    assert llm.profile is SMALL_LOCAL and profile_of(llm) is SMALL_LOCAL
    llm._sampling["temperature"] = 0.7
    assert llm.profile == dataclasses.replace(SMALL_LOCAL, deterministic=False)
    assert HyDERAGConfig.for_profile(llm.profile).num_hypothetical_docs == 3


# ----------------------------------------------------------------------------- the presets


def sizes(strategy: Any) -> dict[str, Any]:
    """The sizes a profile decides, for the strategy built by ``build_strategy``."""
    if isinstance(strategy, SelfIRAG):
        c = strategy.config
        return {"fast_mode": c.fast_mode, "iterations": c.max_refinement_iterations, "top_k": c.top_k}
    if isinstance(strategy, HyDERAG):
        c = strategy.config
        return {"docs": c.num_hypothetical_docs, "top_k": c.top_k, "final": c.max_final_docs}
    if isinstance(strategy, RecursiveRAG):
        c = strategy.config
        return {"depth": c.max_depth, "subs": c.max_sub_questions, "top_k": c.top_k}
    if isinstance(strategy, SelfHealingRAG):
        return {"retries": strategy.config.max_retries, "top_k": strategy.config.top_k}
    assert isinstance(strategy, PlainRAG)
    return {"top_k": strategy.config.top_k}


def build_all(rag: Any, llm: Any, **options: Any) -> dict[str, dict[str, Any]]:
    names = (presets.BASELINE, *presets.STRATEGIES)
    return {name: sizes(presets.build_strategy(name, rag, llm, **options)) for name in names}


def test_the_small_preset_is_the_small_local_profile(parts: tuple[FakeRetriever, FakeLLM]) -> None:
    built = build_all(*parts, preset="small")
    assert built == {
        "plain": {"top_k": 3},
        "self": {"fast_mode": False, "iterations": 2, "top_k": 3},
        "hyde": {"docs": 1, "top_k": 3, "final": 3},
        # a split by rule only, one level deep (else one retrieval, one answer)
        "recursive": {"depth": 1, "subs": 4, "top_k": 3},
        "healing": {"retries": 1, "top_k": 3},
    }
    assert build_all(*parts, preset=SMALL_LOCAL) == built
    assert build_all(*parts) == built  # the default preset


def test_the_standard_preset_is_the_capable_profile(parts: tuple[FakeRetriever, FakeLLM]) -> None:
    own = RecursiveRAGConfig()
    built = build_all(*parts, preset="standard", top_k=None)
    assert built == {
        "plain": {"top_k": 5},
        "self": {"fast_mode": True, "iterations": 3, "top_k": 5},
        "hyde": {"docs": 3, "top_k": 5, "final": 10},
        "recursive": {"depth": own.max_depth, "subs": own.max_sub_questions, "top_k": 5},
        "healing": {"retries": 2, "top_k": 5},
    }
    assert build_all(*parts, preset=CAPABLE, top_k=None) == built


def test_a_custom_profile_sizes_each_strategy(parts: tuple[FakeRetriever, FakeLLM]) -> None:
    greedy = ModelProfile("greedy-json", deterministic=True, follows_json=True)
    built = build_all(*parts, preset=greedy, top_k=None)
    assert built == {
        "plain": {"top_k": 5},
        "self": {"fast_mode": True, "iterations": 3, "top_k": 5},
        "hyde": {"docs": 1, "top_k": 5, "final": 10},  # greedy: one hypothetical document
        "recursive": {"depth": 3, "subs": 4, "top_k": 5},
        "healing": {"retries": 2, "top_k": 5},
    }
    # an explicit top_k wins over the profile's
    assert build_all(*parts, preset=greedy, top_k=2)["self"]["top_k"] == 2
    # a small window (without JSON) takes the profile's top_k, and caps HyDE's fused passages
    cramped = ModelProfile("cramped", context_window=1024, follows_json=False)
    hyde = presets.build_strategy("hyde", *parts, preset=cramped, top_k=None)
    assert sizes(hyde) == {"docs": 3, "top_k": 3, "final": 3}


@pytest.mark.parametrize(("profile", "cite"), [(SMALL_LOCAL, False), (CAPABLE, True)])
def test_the_instruction_to_cite_follows_the_profile(
    parts: tuple[FakeRetriever, FakeLLM], profile: ModelProfile, cite: bool
) -> None:
    strategy = presets.build_strategy("plain", *parts, preset=profile)
    assert isinstance(strategy.prompts, Prompts) and strategy.prompts.cite is cite


def test_an_unknown_preset_names_the_profiles(parts: tuple[FakeRetriever, FakeLLM]) -> None:
    with pytest.raises(ConfigurationError, match=r"unknown preset 'huge'.*or pass a ModelProfile"):
        presets.build_strategy("self", *parts, preset="huge")


@pytest.mark.parametrize(
    ("spec", "preset"),
    [
        ("local", "small"),
        ("fake", "small"),
        ("gemma", "small"),
        ("m.gguf", "small"),
        ("openai:gpt", "standard"),
    ],
)
def test_preset_for_still_names_a_preset(spec: str, preset: str) -> None:
    assert presets.preset_for(spec) == preset
