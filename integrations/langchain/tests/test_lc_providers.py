"""make_chat_model: provider:model specs for the CLI's --llm."""

from __future__ import annotations

import sys
import types

import pytest

from selfrag_core import ConfigurationError, MissingDependencyError
from selfrag_langchain import LangChainLLM, make_chat_model, make_llm
from selfrag_langchain import providers as providers_module


@pytest.mark.parametrize("spec", ["llama3.2", "ollama:", ":llama3.2", 3])
def test_malformed_specs(spec: object) -> None:
    with pytest.raises(ConfigurationError, match="provider:model"):
        make_chat_model(spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("use_langchain", [True, False], ids=["init_chat_model", "table"])
def test_missing_provider_package_names_it(monkeypatch: pytest.MonkeyPatch, use_langchain: bool) -> None:
    if not use_langchain:
        monkeypatch.setitem(sys.modules, "langchain.chat_models", None)  # import fails
    monkeypatch.setitem(sys.modules, "langchain_ollama", None)
    with pytest.raises(MissingDependencyError, match=r"pip install langchain-ollama"):
        make_chat_model("ollama:llama3.2")


def test_unknown_provider_without_langchain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
    with pytest.raises(ConfigurationError, match="unknown provider 'nosuch'"):
        make_chat_model("nosuch:model")


def test_table_path_builds_the_chat_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_core.language_models import FakeListChatModel

    class FakeChat(FakeListChatModel):
        model: str = ""

    monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
    monkeypatch.setitem(sys.modules, "fake_provider", types.SimpleNamespace(FakeChat=FakeChat))
    monkeypatch.setitem(providers_module.PROVIDERS, "fake", ("fake-provider", "fake_provider", "FakeChat"))
    llm = make_llm("fake:tiny-1", responses=["hello"])
    assert isinstance(llm, LangChainLLM) and llm.model.model == "tiny-1"
    assert llm.generate("hi").text == "hello"


def test_unknown_provider_with_langchain_is_a_configuration_error() -> None:
    pytest.importorskip("langchain.chat_models", reason="pip install 'selfrag-langchain[providers]'")
    with pytest.raises(ConfigurationError, match="cannot make a chat model for 'nosuch:model'"):
        make_chat_model("nosuch:model")


def test_the_core_finds_langchain_models_through_the_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """``selfrag --llm provider:model`` reaches this package through its ``selfrag.llm_providers``
    entry point (pyproject.toml), never by importing it."""
    from importlib.metadata import entry_points

    from langchain_core.language_models import FakeListChatModel

    from selfrag_core.local import factory

    registered = {(ep.name, ep.value) for ep in entry_points(group=factory.PROVIDER_GROUP)}
    assert ("*", "selfrag_langchain.providers:make_llm") in registered

    class FakeChat(FakeListChatModel):
        model: str = ""
        responses: list[str] = ["hello"]  # noqa: RUF012

    monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
    monkeypatch.setitem(sys.modules, "fake_provider", types.SimpleNamespace(FakeChat=FakeChat))
    monkeypatch.setitem(providers_module.PROVIDERS, "fake", ("fake-provider", "fake_provider", "FakeChat"))
    llm = factory.make_llm("fake:tiny-1")
    assert isinstance(llm, LangChainLLM) and llm.model.model == "tiny-1"
    monkeypatch.setitem(sys.modules, "langchain_ollama", None)
    with pytest.raises(MissingDependencyError, match=r"pip install langchain-ollama"):
        factory.make_llm("ollama:llama3.2")
