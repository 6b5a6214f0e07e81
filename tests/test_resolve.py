"""A backend and an LLM are resolved once (issue 31): what the object is, which of its
methods a call reaches and what options those take are decided when it is first used
(or resolved), never again per call; the resolution does not keep the object alive; the
framework recognisers live in ``selfrag_core.frameworks``."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections import Counter
from typing import Any

import pytest

from selfrag_core import PlainRAG, frameworks, llm, retrieval
from selfrag_core.llm import LLMClient, call_llm_detailed, resolve_llm
from selfrag_core.retrieval import Backend, _aretrieve_safe, _retrieve_safe, resolve_backend
from selfrag_core.testing import FakeLLM


class CountedBackend:
    """A backend that counts every lookup of its attributes."""

    score_kind = "similarity"

    def __init__(self) -> None:
        self.lookups: Counter[str] = Counter()
        self.calls: list[tuple[str, int, Any]] = []

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name not in ("lookups", "calls"):
            object.__getattribute__(self, "lookups")[name] += 1
        return object.__getattribute__(self, name)

    def retrieve(self, query: str, top_k: int, metadata_filter: Any = None) -> list[tuple[str, float]]:
        self.calls.append((query, top_k, metadata_filter))
        return [("Paris is the capital of France.", 0.9), ("Berlin is in Germany.", 0.4)]


class CountedLLM:
    def __init__(self) -> None:
        self.lookups: Counter[str] = Counter()
        self.prompts: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name not in ("lookups", "prompts"):
            object.__getattribute__(self, "lookups")[name] += 1
        return object.__getattribute__(self, name)

    def generate(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return "Paris."


def test_a_backend_is_inspected_once_however_often_it_is_resolved_and_queried() -> None:
    backend = CountedBackend()
    resolved = resolve_backend(backend)
    after_resolution = dict(backend.lookups)
    assert after_resolution["retrieve"] >= 1
    assert resolve_backend(backend) is resolved  # the second resolution is the first
    for _ in range(3):
        docs = _retrieve_safe(backend, "capital of France", 1, metadata_filter={"lang": "en"})
        assert [d.text for d in docs] == ["Paris is the capital of France."]
    asyncio.run(_aretrieve_safe(backend, "capital", 2))
    assert dict(backend.lookups) == after_resolution  # no attribute looked up again
    # the same calls reached it as before the resolution was kept: options it takes, top_k
    assert backend.calls == [("capital of France", 1, {"lang": "en"})] * 3 + [("capital", 2, None)]
    assert docs[0].score_kind.value == "similarity"  # its declared kind, read once


def test_an_llm_is_inspected_once_however_often_it_is_resolved_and_called() -> None:
    model = CountedLLM()
    client = resolve_llm(model)
    after_resolution = dict(model.lookups)
    assert after_resolution["generate"] >= 1
    assert resolve_llm(model) is client
    for _ in range(3):
        assert call_llm_detailed(model, "Capital of France?", retries=0).text == "Paris."
    assert dict(model.lookups) == after_resolution
    assert model.prompts == ["Capital of France?"] * 3


def test_a_strategy_query_resolves_its_backend_and_llm_once() -> None:
    backend = CountedBackend()
    strategy = PlainRAG(backend, FakeLLM(default="Paris [1]."))
    contract = ("retrieve", "aretrieve", "retrieve_many", "aretrieve_many", "score_kind", "invoke")
    strategy.query("capital of France?")
    after_first = {name: backend.lookups[name] for name in contract}
    strategy.query("capital of France?")
    asyncio.run(strategy.aquery("capital of France?"))
    # (the trace still asks what it searched, data_source_id, on each retrieval)
    assert {name: backend.lookups[name] for name in contract} == after_first
    assert after_first["retrieve"] >= 1
    assert strategy.rag_system is backend  # the public attribute stays what was passed


def test_resolved_objects_pass_through_and_the_resolution_does_not_keep_the_object_alive() -> None:
    backend, model = CountedBackend(), CountedLLM()
    resolved, client = resolve_backend(backend), resolve_llm(model)
    assert isinstance(resolved, Backend) and isinstance(client, LLMClient)
    assert resolve_backend(resolved) is resolved and resolve_llm(client) is client
    assert resolved.source is backend and client.source is model
    gone = weakref.ref(backend), weakref.ref(model)
    gc.collect()  # (an earlier test's garbage goes first: only these two entries may go below)
    kept = len(retrieval._RESOLVED), len(llm._RESOLVED)
    del backend, model, resolved, client
    gc.collect()
    assert gone[0]() is None and gone[1]() is None
    assert (len(retrieval._RESOLVED), len(llm._RESOLVED)) == (kept[0] - 1, kept[1] - 1)


def test_a_resolution_whose_object_is_gone_says_so() -> None:
    """``resolve_backend(Backend())`` keeps nothing alive: using it after the object is
    collected raises a ConfigurationError that says what to keep, not a TypeError from
    inside the call."""
    from selfrag_core.errors import ConfigurationError

    resolved, client = resolve_backend(CountedBackend()), resolve_llm(CountedLLM())
    gc.collect()
    with pytest.raises(ConfigurationError, match="keep a reference to the object"):
        resolved.retrieve("q", 1)
    with pytest.raises(ConfigurationError, match="garbage-collected"):
        client.generate("p")


class Slotted:
    """No weak references: resolved on each use, still served."""

    __slots__ = ()

    def retrieve(self, query: str, top_k: int) -> list[str]:
        return [f"{query} #{i}" for i in range(top_k)]

    def generate(self, prompt: str) -> str:
        return prompt.upper()


def test_objects_without_weak_references_are_resolved_each_time_and_still_work() -> None:
    obj = Slotted()
    assert [d.text for d in _retrieve_safe(obj, "q", 2)] == ["q #0", "q #1"]
    assert call_llm_detailed(obj, "hi", retries=0).text == "HI"
    assert resolve_backend(obj).source is obj


class FreshEachTime:
    """A ``retrieve`` made anew on each access (a property): looked up again when gone."""

    @property
    def retrieve(self) -> Any:
        return lambda query, top_k: [query] * top_k


def test_a_method_made_on_each_access_is_looked_up_again() -> None:
    backend = FreshEachTime()
    resolve_backend(backend)
    gc.collect()
    assert [d.text for d in _retrieve_safe(backend, "q", 1)] == ["q"]


def test_a_non_backend_raises_the_same_error_on_each_call() -> None:
    class NotABackend:
        pass

    for _ in range(2):
        with pytest.raises(Exception, match="NotABackend is not a retrieval backend"):
            _retrieve_safe(NotABackend(), "q")
    held = NotABackend()  # (a resolution serves while its object lives)
    with pytest.raises(TypeError, match="NotABackend is not an LLM"):
        resolve_llm(held).generate("hi")
    assert not resolve_backend(held).retrieves  # what presets.load_backend refuses

    class AsyncOnly:
        async def aretrieve(self, query: str, top_k: int) -> list[str]:
            return [query]

    assert resolve_backend(AsyncOnly()).retrieves and resolve_backend(Slotted()).retrieves
    assert resolve_backend(lambda query: [query]).retrieves


def test_the_framework_recognisers_live_in_frameworks_only() -> None:
    for module in (retrieval, llm):
        for private in (
            "_mro_names",
            "_from_package",
            "_is_langchain",
            "_is_llamaindex",
            "_is_lc_vectorstore",
        ):
            assert not hasattr(module, private), f"{module.__name__}.{private}"

    # recognised by class names and package, without importing a framework
    VectorStore = type("VectorStore", (), {"similarity_search_with_score": lambda self, q: []})
    BaseRetriever = type("BaseRetriever", (), {"invoke": lambda self, q: []})
    Runnable = type("Runnable", (), {"invoke": lambda self, q: ""})

    class Store(VectorStore):  # type: ignore[misc, valid-type]
        pass

    assert frameworks.is_langchain_vectorstore(Store())
    assert frameworks.is_langchain_retriever(BaseRetriever())
    assert frameworks.is_langchain_runnable(Runnable())
    assert not frameworks.is_langchain_runnable(BaseRetriever())
    assert frameworks.mro_names(Store()) >= {"Store", "VectorStore", "object"}
    assert frameworks.from_package(Store(), __name__.partition(".")[0])
    assert not frameworks.is_llamaindex_retriever(Slotted())  # has retrieve, not LlamaIndex's
    # a query engine and its Response, by LlamaIndex's package
    engine = type("Engine", (), {"query": lambda self, q: None, "__module__": "llama_index.core.x"})
    answer = {"response": "", "source_nodes": [], "__module__": "llama_index.core.base.response.schema"}
    assert frameworks.is_llamaindex_query_engine(engine()) and not frameworks.is_langchain_runnable(engine())
    assert frameworks.is_llamaindex_response(type("Response", (), answer)())
    assert not frameworks.is_llamaindex_query_engine(type("Engine", (), {"query": lambda self, q: None})())
    assert not frameworks.is_llamaindex_response(type("Response", (), {**answer, "__module__": __name__})())
    assert not frameworks.is_llamaindex_llm(FakeLLM())


async def test_an_llm_ping_is_resolved_with_it() -> None:
    class Pinged(FakeLLM):
        def ping(self) -> bool:
            return False

    class APinged(Pinged):
        async def aping(self) -> str:
            return "up"

    plain = FakeLLM()
    assert not resolve_llm(plain).pings
    with pytest.raises(TypeError, match="FakeLLM has no ping"):
        await resolve_llm(plain).aping()
    pinged, apinged = Pinged(), APinged()
    assert resolve_llm(pinged).pings and await resolve_llm(pinged).aping() is False  # in a thread
    assert await resolve_llm(apinged).aping() == "up"  # the async one first
