"""selfrag_core.presets: the one strategy factory and index opener of the CLI and the server."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import presets
from selfrag_core.cli import commands
from selfrag_core.config import (
    ExecutionConfig,
    HyDERAGConfig,
    RecursiveRAGConfig,
    SelfHealingRAGConfig,
    SelfRAGConfig,
)
from selfrag_core.errors import ConfigurationError
from selfrag_core.strategies import HyDERAG, RecursiveRAG, SelfHealingRAG, SelfIRAG, Strategy
from selfrag_core.testing import FakeLLM, FakeRetriever


@pytest.fixture
def parts() -> tuple[FakeRetriever, FakeLLM]:
    return FakeRetriever([]), FakeLLM([])


def settings(value: Any) -> Any:
    """What a strategy is configured with: its plain and dataclass attributes, its
    sub-strategies' settings, the type of anything else (the LLM and the backend are
    the same objects in both)."""
    if isinstance(value, list):
        return [settings(v) for v in value]
    if isinstance(value, Strategy):
        return (type(value).__name__, {k: settings(v) for k, v in vars(value).items()})
    if value is None or isinstance(value, (int, float, str)) or dataclasses.is_dataclass(value):
        return value
    return type(value).__name__


def test_the_cli_and_the_server_share_the_factory_and_the_opener() -> None:
    from selfrag_core import serve

    assert commands.build_strategy is presets.build_strategy
    assert commands.open_index is presets.open_index
    assert commands.STRATEGIES == presets.STRATEGIES
    assert serve.default_strategies is presets.default_strategies
    assert serve.open_backend is presets.open_backend


def test_small_preset_is_sized_for_a_small_model(parts: tuple[FakeRetriever, FakeLLM]) -> None:
    rag, llm = parts
    execution = ExecutionConfig(max_llm_calls=12, llm_timeout=120.0, query_timeout=600.0)
    built = {name: presets.build_strategy(name, rag, llm) for name in presets.STRATEGIES}

    assert isinstance(built["self"], SelfIRAG)
    assert built["self"].config == SelfRAGConfig(
        max_refinement_iterations=2, top_k=3, fast_mode=False, stop_when_supported=True, drafts=2, quotes=True
    )
    hyde = built["hyde"]
    assert isinstance(hyde, HyDERAG)
    assert hyde.config == HyDERAGConfig(num_hypothetical_docs=1, top_k=3, max_final_docs=3, quotes=True)
    assert isinstance(built["recursive"], RecursiveRAG)
    # a model that cannot keep JSON writes junk sub-questions and merges badly: a question
    # of several parts is split by rule, one level, and its answers joined; any other is plain
    expected = RecursiveRAGConfig(max_depth=1, decomposition="rules", merge=False, top_k=3, quotes=True)
    assert built["recursive"].config == expected
    healing = built["healing"]
    assert isinstance(healing, SelfHealingRAG)
    assert healing.config == SelfHealingRAGConfig(max_retries=1, top_k=3, quotes=True)
    assert healing.strategies[0] is rag and isinstance(healing.strategies[1], HyDERAG)
    assert all(strategy.execution == execution for strategy in built.values())


def test_default_strategies_keep_each_strategys_own_defaults(parts: tuple[FakeRetriever, FakeLLM]) -> None:
    rag, llm = parts
    built = presets.default_strategies(rag, llm)
    assert list(built) == ["self", "hyde", "recursive", "healing"]
    own = {
        "self": SelfIRAG(rag, llm),
        "hyde": HyDERAG(rag, llm),
        "recursive": RecursiveRAG(rag, llm),
        "healing": SelfHealingRAG(llm, [rag, HyDERAG(rag, llm)]),
    }
    for name, strategy in built.items():
        assert settings(strategy) == settings(own[name]), name
        assert strategy.execution == ExecutionConfig(), name


def test_top_k_and_limits_apply_to_either_preset(parts: tuple[FakeRetriever, FakeLLM]) -> None:
    rag, llm = parts
    hyde = presets.build_strategy("hyde", rag, llm, preset="standard", top_k=7, max_llm_calls=None)
    assert isinstance(hyde, HyDERAG)
    assert hyde.config == HyDERAGConfig(num_hypothetical_docs=3, top_k=7, max_final_docs=10)
    assert hyde.execution.max_llm_calls is None and hyde.execution.llm_timeout == presets.DEFAULT_LLM_TIMEOUT


@pytest.mark.parametrize(
    ("name", "preset", "message"),
    [("nope", "small", "unknown strategy 'nope'"), ("self", "huge", "unknown preset 'huge'")],
)
def test_unknown_names_are_configuration_errors(
    parts: tuple[FakeRetriever, FakeLLM], name: str, preset: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        presets.build_strategy(name, *parts, preset=preset)


def test_open_index_refuses_a_file_and_a_missing_index(tmp_path: Path) -> None:
    pytest.importorskip("bm25s")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    with pytest.raises(ConfigurationError, match="is a file, not an index directory"):
        presets.open_index(a_file, create=True)
    with pytest.raises(ConfigurationError, match=r"no index at .*selfrag index PATH"):
        presets.open_index(tmp_path / "none", create=False)
    with pytest.raises(ConfigurationError, match="unknown embedder 'bert'"):
        presets.open_index(tmp_path / "new", create=True, embed="bert")


def test_open_index_creates_saves_and_reopens(tmp_path: Path) -> None:
    pytest.importorskip("bm25s")
    rag = presets.open_index(tmp_path / "index", create=True, embed="hashing", chunk_size=300)
    rag.index_many([{"text": "Honeybees dance to show where flowers are.", "source": "bees.md"}])
    rag.save()
    again = presets.open_backend(tmp_path / "index")
    assert again.sources() == rag.sources() and again.count() == rag.count() > 0
    assert presets.open_backend(None).count() == 0  # in memory


def test_the_preset_follows_the_model_named_on_the_command_line() -> None:
    """The embedded models (and the fake) get the small sizes; a provider's model the
    strategies' own defaults, which a capable model makes use of."""
    from selfrag_core.presets import preset_for

    for spec in ("local", "smollm2", "gemma", "fake", "models/tiny.gguf", "C:\\models\\x.gguf"):
        assert preset_for(spec) == "small", spec
    for spec in ("openai:gpt-4o-mini", "ollama:llama3.2", "anthropic:claude-haiku"):
        assert preset_for(spec) == "standard", spec


# ----------------------------------------------------------------------------- --backend specs


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        (None, "memory"),
        ("chroma://127.0.0.1:8001/docs", "url"),  # registered by its scheme (selfrag.backends)
        ("chroma:docs", "url"),  # a registered scheme: opening it says what is wrong
        ("memo://notes.json", "url"),  # any SCHEME://: opening an unregistered one names the registered
        ("my_package.backends:make", "factory"),
        ("backends/mine.py:make", "factory"),
        ("mine.py:make.inner", "factory"),
        ("./index", "directory"),
        ("index", "directory"),
        ("C:\\indexes\\docs", "directory"),
        ("data:2024-01", "directory"),  # "2024-01" is no name: a directory with a colon
        ("a b:c", "directory"),
    ],
)
def test_backend_specs_are_told_apart(spec: str | None, kind: str) -> None:
    assert presets.backend_kind(spec) == kind


def test_a_directory_named_like_a_factory_is_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg:attr").mkdir()
    assert presets.backend_kind("pkg:attr") == "directory"
    assert presets.backend_kind(Path("pkg:attr")) == "directory"


_FACTORIES = """
from selfrag_core.testing import FakeRetriever

seen = {}


def with_embedder(embedder):
    seen["embedder"] = type(embedder).__name__
    return FakeRetriever(["Rome is the capital of Italy."])


def plain():
    return FakeRetriever(["Madrid is the capital of Spain."])


class Index:  # a LlamaIndex-like index: it only gives a retriever
    def as_retriever(self):
        return FakeRetriever(["Lisbon is the capital of Portugal."])


def nothing():
    return 42


class Invoker:  # invoke(query), as LangChain's retrievers have it, and no retriever
    def invoke(self, query):
        return []


class AsyncOnly:  # an async retrieval only: a backend
    async def aretrieve(self, query, top_k=5):
        return ["Oslo is the capital of Norway."]
"""


def test_open_backend_calls_a_factory_by_file_or_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_backends.py").write_text(_FACTORIES, encoding="utf-8")
    made = presets.open_backend(f"{tmp_path / 'my_backends.py'}:with_embedder", embed="hashing")
    assert isinstance(made, FakeRetriever) and made.retrieve("capital", 1)
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_backends  # type: ignore[import-not-found]

    assert isinstance(presets.open_backend("my_backends:with_embedder", embed="hashing"), FakeRetriever)
    assert my_backends.seen["embedder"] == "HashingEmbeddings"
    assert presets.open_backend("my_backends:plain").documents == ["Madrid is the capital of Spain."]
    assert presets.open_backend("my_backends:Index").documents == ["Lisbon is the capital of Portugal."]
    with pytest.raises(ConfigurationError, match="cannot retrieve"):
        presets.open_backend("my_backends:nothing")
    # what retrieval resolves it to decides (retrieval.resolve_backend), not a method's name
    with pytest.raises(ConfigurationError, match="made a Invoker, which cannot retrieve: return a vector"):
        presets.open_backend("my_backends:Invoker")
    assert type(presets.open_backend("my_backends:AsyncOnly")).__name__ == "AsyncOnly"
    with pytest.raises(ConfigurationError, match="cannot load the backend"):
        presets.open_backend("my_backends:no_such_factory")
    with pytest.raises(ConfigurationError, match="cannot load the backend"):
        presets.open_backend(f"{tmp_path / 'missing.py'}:make")


def test_open_backend_opens_a_directory_index(tmp_path: Path) -> None:
    rag = presets.open_backend(str(tmp_path / "index"), embed="none", chunk_size=300)
    rag.add_document("Rome is the capital of Italy.", {"source": "italy.md"})
    rag.save()
    assert presets.open_backend(str(tmp_path / "index")).count() == 1
    assert presets.open_backend(tmp_path / "index").count() == 1  # a Path, as before


def test_an_external_backend_needs_vectors() -> None:
    with pytest.raises(ConfigurationError, match="searches vectors"):
        presets.backend_embedder("none")
    with pytest.raises(ConfigurationError, match="unknown embedder"):
        presets.backend_embedder("bert")
    assert type(presets.backend_embedder("hashing")).__name__ == "HashingEmbeddings"


def test_a_strategy_of_ones_own_must_be_a_strategy(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(
        "class Planner:  # a plan and nothing else of a Strategy\n"
        "    def __init__(self, rag, llm):\n"
        "        pass\n"
        "    def plan(self, query, context=None):\n"
        "        yield from ()\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigurationError, match="made a Planner, which is not a Strategy: subclass"):
        presets.build_strategy(f"{tmp_path / 'mine.py'}:Planner", FakeRetriever([]), FakeLLM())
