"""Retrieval without the instrumentation nobody receives: the same nodes as the
retriever's own ``retrieve``, and every event back as soon as anything listens."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import re
import weakref
from collections.abc import Iterator
from typing import Any

import llama_index.core.instrumentation as instrument
import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import CompletionResponse
from llama_index.core.base.response.schema import Response
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.callbacks.base import global_stack_trace
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.llms import MockLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.retrievers import VectorIndexRetriever
from llama_index.core.schema import IndexNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.kvstore import SimpleKVStore

from selfrag_llamaindex import LlamaIndexLLM, _quiet, as_backend
from selfrag_llamaindex._usage import UsageHandler

from .li_fakes import HashEmbedding, ScriptedLLM, hash_vector

pytestmark = pytest.mark.integration

QUERIES = ["What is the capital of France?", "Berlin", "rivers and mountains", "zzz unrelated"]


def _ids_and_scores(nodes: list[NodeWithScore]) -> list[tuple[str, float | None]]:
    return [(n.node.node_id, n.score) for n in nodes]


class Collect(BaseEventHandler):
    seen: list[str]

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.seen.append(event.class_name())


@pytest.fixture
def root_handler() -> Iterator[Collect]:
    handler = Collect(seen=[])
    root = instrument.get_dispatcher()
    root.add_event_handler(handler)
    yield handler
    root.event_handlers.remove(handler)


def test_nothing_observes_a_fresh_index_retriever(index) -> None:
    assert _quiet.unobserved(index.as_retriever(similarity_top_k=3)) == _quiet.DEEP


@pytest.mark.parametrize("vectorized", [True, False])
def test_the_same_nodes_and_scores_as_the_retrievers_own(index, vectorized) -> None:
    quiet = as_backend(index, vectorized=vectorized)
    loud = as_backend(index, vectorized=vectorized, instrument="always")
    for query in QUERIES:
        retriever = loud.retriever_for(4)
        own = _ids_and_scores(retriever.retrieve(query))
        for depth in (_quiet.DEEP, _quiet.OUTER):
            assert _ids_and_scores(_quiet.retrieve(retriever, query, depth)) == own
            assert _ids_and_scores(asyncio.run(_quiet.aretrieve(retriever, query, depth))) == own
        assert quiet.retrieve(query, 4) == loud.retrieve(query, 4)
        assert asyncio.run(quiet.aretrieve(query, 4)) == asyncio.run(loud.aretrieve(query, 4))


def test_the_backend_takes_the_quiet_path_only_when_unobserved(index, monkeypatch) -> None:
    calls: list[str] = []
    quiet = _quiet.retrieve

    def counted(retriever: Any, query: str, depth: str) -> Any:
        calls.append(depth)
        return quiet(retriever, query, depth)

    monkeypatch.setattr(_quiet, "retrieve", counted)
    as_backend(index).retrieve("Paris", 2)
    assert calls == [_quiet.DEEP]
    as_backend(index, instrument="always").retrieve("Paris", 2)
    assert calls == [_quiet.DEEP]
    with pytest.raises(ValueError, match="instrument"):
        as_backend(index, instrument="sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cls", "name", "then"),
    [
        (BaseRetriever, "retrieve", None),
        (BaseRetriever, "aretrieve", None),
        (VectorIndexRetriever, "_aretrieve", _quiet.OUTER),
        (BaseEmbedding, "aget_query_embedding", _quiet.OUTER),
    ],
)
def test_a_method_patched_in_place_is_not_skipped(index, monkeypatch, cls, name, then) -> None:
    """An instrumentor may wrap LlamaIndex's methods on the class itself (no subclass):
    the quiet path must then call them, from the next retrieval on and no longer after."""
    retriever = index.as_retriever(similarity_top_k=2)
    assert _quiet.unobserved(retriever) == _quiet.DEEP
    original = inspect.getattr_static(cls, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    monkeypatch.setattr(cls, name, wrapper)
    assert _quiet.unobserved(retriever) == then
    monkeypatch.undo()
    assert _quiet.unobserved(retriever) == _quiet.DEEP


def test_only_llamaindexs_own_functions_count_as_unpatched() -> None:
    assert all(map(_quiet._llamaindex_own, _quiet._OUTER_SKIPS.values()))
    assert all(map(_quiet._llamaindex_own, _quiet._EMBED_SKIPS.values()))

    def retrieve(self: Any, query: Any) -> Any:  # a plain wrapper, as a patch installed early would be
        return []

    assert not _quiet._llamaindex_own(retrieve)
    assert not _quiet._llamaindex_own(functools.wraps(BaseRetriever.retrieve)(retrieve))


def test_an_empty_query_fails_as_the_retrievers_own_does(index) -> None:
    retriever = index.as_retriever(similarity_top_k=2)
    with pytest.raises(TypeError) as own:
        retriever.retrieve("")
    with pytest.raises(type(own.value)):
        _quiet.retrieve(retriever, "", _quiet.DEEP)
    with pytest.raises(type(own.value)):
        asyncio.run(_quiet.aretrieve(retriever, "", _quiet.DEEP))


def test_callback_events_inside_a_quiet_retrieval_stay_in_a_per_retrieval_trace() -> None:
    class Eventful(Letters):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            with self.callback_manager.event(CBEventType.EMBEDDING, payload={}):
                return super()._retrieve(query_bundle)

    retriever = Eventful()
    assert _quiet.unobserved(retriever) == _quiet.OUTER
    backend = as_backend(retriever)
    for _ in range(50):
        backend.retrieve("a query", 2)
        asyncio.run(backend.aretrieve("b query", 2))
    assert sum(map(len, retriever.callback_manager.trace_map.values())) <= 2  # not one per retrieval


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("whose", ["retriever", "embedding"])
def test_a_callback_handler_on_the_retriever_or_its_embedding_sees_their_events(whose, use_async) -> None:
    debug = LlamaDebugHandler(print_trace_on_end=False)
    nodes = [TextNode(text=f"text number {i}", id_=f"n{i}") for i in range(5)]
    index = VectorStoreIndex(nodes, embed_model=HashEmbedding())
    index._embed_model.callback_manager = CallbackManager([debug] if whose == "embedding" else [])
    manager = CallbackManager([debug] if whose == "retriever" else [])
    retriever = VectorIndexRetriever(index=index, similarity_top_k=2, callback_manager=manager)
    assert _quiet.unobserved(retriever) == (None if whose == "retriever" else _quiet.OUTER)
    backend = as_backend(retriever)
    docs = asyncio.run(backend.aretrieve("text 3", 2)) if use_async else backend.retrieve("text 3", 2)
    assert len(docs) == 2
    watched = CBEventType.RETRIEVE if whose == "retriever" else CBEventType.EMBEDDING
    assert debug.get_event_pairs(watched)


@pytest.mark.parametrize("use_async", [False, True])
def test_an_instrumentation_event_handler_sees_the_retrieval_events(index, root_handler, use_async) -> None:
    backend = as_backend(index)
    assert _quiet.unobserved(backend.retriever_for(2)) is None
    asyncio.run(backend.aretrieve("Paris", 2)) if use_async else backend.retrieve("Paris", 2)
    for name in ("RetrievalStartEvent", "EmbeddingStartEvent", "EmbeddingEndEvent", "RetrievalEndEvent"):
        assert name in root_handler.seen


def test_a_span_handler_on_the_embeddings_dispatcher_alone_sees_the_embedding_span(index) -> None:
    spans = SimpleSpanHandler()
    dispatcher = instrument.get_dispatcher(BaseEmbedding.__module__)
    dispatcher.add_span_handler(spans)
    try:
        as_backend(index).retrieve("Paris", 2)
    finally:
        dispatcher.span_handlers.remove(spans)
    assert any("get_query_embedding" in span.id_ for span in spans.completed_spans)


def test_selfrags_own_token_counter_does_not_count_as_observing(index) -> None:
    root = instrument.get_dispatcher()
    counter = UsageHandler()
    root.add_event_handler(counter)
    try:
        assert _quiet.unobserved(index.as_retriever(similarity_top_k=2)) == _quiet.DEEP
    finally:
        root.event_handlers.remove(counter)


def test_embeddings_and_retrievers_that_change_the_steps_keep_the_full_path() -> None:
    class OwnQueryEmbedding(HashEmbedding):
        def get_query_embedding(self, query: str) -> list[float]:
            return hash_vector(query.upper())

    nodes = [TextNode(text="alpha beta", id_="a")]
    own_embedding = VectorStoreIndex(nodes, embed_model=OwnQueryEmbedding())
    assert _quiet.unobserved(own_embedding.as_retriever(similarity_top_k=1)) == _quiet.OUTER

    cached = HashEmbedding(embeddings_cache=SimpleKVStore())
    index = VectorStoreIndex(nodes, embed_model=cached)
    assert index._embed_model is cached
    assert _quiet.unobserved(index.as_retriever(similarity_top_k=1)) == _quiet.OUTER

    class OwnSteps(VectorIndexRetriever):
        pass

    class OwnRetrieve(VectorIndexRetriever):
        async def aretrieve(self, str_or_query_bundle: Any) -> list[NodeWithScore]:
            return []

    index = VectorStoreIndex(nodes, embed_model=HashEmbedding())
    assert _quiet.unobserved(OwnSteps(index=index, similarity_top_k=1)) == _quiet.OUTER
    assert _quiet.unobserved(OwnRetrieve(index=index, similarity_top_k=1)) is None


def test_recursive_retrieval_of_index_nodes_is_kept() -> None:
    inner = VectorStoreIndex(
        [TextNode(text="the inner lake is deep", id_="lake"), TextNode(text="inner hills", id_="hill")],
        embed_model=HashEmbedding(),
    ).as_retriever(similarity_top_k=1)
    nodes = [
        TextNode(text="an outer road", id_="road"),
        IndexNode(text="inner lake summary", index_id="inner", id_="pointer"),
    ]
    outer = VectorStoreIndex(nodes, embed_model=HashEmbedding())
    retriever = VectorIndexRetriever(index=outer, similarity_top_k=2, object_map={"inner": inner})
    assert _quiet.unobserved(retriever) == _quiet.DEEP
    own = _ids_and_scores(retriever.retrieve(QueryBundle("inner lake")))
    assert "lake" in [node_id for node_id, _ in own]  # the IndexNode was followed
    for depth in (_quiet.DEEP, _quiet.OUTER):
        assert _ids_and_scores(_quiet.retrieve(retriever, "inner lake", depth)) == own
        assert _ids_and_scores(asyncio.run(_quiet.aretrieve(retriever, "inner lake", depth))) == own


def test_an_embedding_that_is_not_a_list_of_floats_is_aggregated_as_llamaindex_does() -> None:
    class ArrayEmbedding(HashEmbedding):
        def _get_query_embedding(self, query: str) -> Any:
            return np.asarray(hash_vector(query), dtype=np.float32)

        async def _aget_query_embedding(self, query: str) -> Any:
            return self._get_query_embedding(query)

    nodes = [TextNode(text=f"text number {i} of {n}", id_=f"{i}-{n}") for i in range(4) for n in "abc"]
    retriever = VectorStoreIndex(nodes, embed_model=ArrayEmbedding()).as_retriever(similarity_top_k=3)
    assert _quiet.unobserved(retriever) == _quiet.DEEP
    own = _ids_and_scores(retriever.retrieve("text number 2 of b"))
    assert _ids_and_scores(_quiet.retrieve(retriever, "text number 2 of b", _quiet.DEEP)) == own
    assert _ids_and_scores(asyncio.run(_quiet.aretrieve(retriever, "text number 2 of b", _quiet.DEEP))) == own


class Letters(BaseRetriever):
    """A retriever of its own: the nodes that share the query's first letter."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        first = query_bundle.query_str[:1].lower()
        texts = ["apple pie", "banana bread", "avocado toast", "blueberry jam"]
        return [NodeWithScore(node=TextNode(text=t, id_=t), score=1.0) for t in texts if t[0] == first]


def test_any_retriever_keeping_the_public_methods_skips_the_outer_instrumentation() -> None:
    retriever, backend = Letters(), as_backend(Letters())
    assert _quiet.unobserved(retriever) == _quiet.OUTER
    assert [d.id for d in backend.retrieve("a query", 5)] == ["apple pie", "avocado toast"]
    found = asyncio.run(backend.aretrieve("b query", 5))
    assert [d.id for d in found] == ["banana bread", "blueberry jam"]
    root, handler = instrument.get_dispatcher(), Collect(seen=[])
    root.add_event_handler(handler)
    try:
        assert _quiet.unobserved(retriever) is None
        backend.retrieve("a query", 5)
    finally:
        root.event_handlers.remove(handler)
    assert "RetrievalStartEvent" in handler.seen


# ------------------------------------------------------------ the spans of LLM calls and embeddings


def _span_names(spans: SimpleSpanHandler) -> list[str]:
    return [span.id_.rsplit("-", 5)[0] for span in spans.completed_spans]


@contextlib.contextmanager
def span_handler(module: str | None = None) -> Iterator[SimpleSpanHandler]:
    """A span handler on ``module``'s dispatcher (the root one by default), for the block."""
    spans = SimpleSpanHandler()
    dispatcher = instrument.get_dispatcher(module) if module else instrument.get_dispatcher()
    dispatcher.add_span_handler(spans)
    try:
        yield spans
    finally:
        dispatcher.span_handlers.remove(spans)


def test_an_llm_call_leaves_out_its_span_but_not_the_events_the_llms_handler_receives(make_llm) -> None:
    llm = make_llm([("capital", "Paris")])
    inner = inspect.getattr_static(type(llm), "acomplete").__wrapped__
    assert _quiet._inside_span(llm, "acomplete") is inner
    debug = LlamaDebugHandler()
    llm.callback_manager = CallbackManager([debug])
    adapter = LlamaIndexLLM(llm)
    assert asyncio.run(adapter.agenerate("the capital?")).text == "Paris"
    assert adapter.generate("the capital?").text == "Paris"
    # the LLM's own callback events are sent as ever (they are inside the span)
    assert len(debug.get_event_pairs(CBEventType.LLM)) == 2


@pytest.mark.parametrize("where", ["root", "the LLM class's module"])
def test_a_span_handler_sees_every_llm_call_span(make_llm, where) -> None:
    llm = make_llm([("capital", "Paris")])
    adapter = LlamaIndexLLM(llm)
    with span_handler(None if where == "root" else type(llm).__module__) as spans:
        assert asyncio.run(adapter.agenerate("the capital?")).text == "Paris"
        assert adapter.generate("the capital?").text == "Paris"
    assert _span_names(spans).count("ScriptedLLM.acomplete") == 1
    assert _span_names(spans).count("ScriptedLLM.complete") == 1
    inner = inspect.getattr_static(type(llm), "acomplete").__wrapped__
    assert _quiet._inside_span(llm, "acomplete") is inner  # (without the handler)


def test_instrument_always_calls_the_llms_public_methods(make_llm, monkeypatch) -> None:
    asked: list[str] = []
    completion = _quiet.completion
    monkeypatch.setattr(_quiet, "completion", lambda obj, name: asked.append(name) or completion(obj, name))
    llm = make_llm([("capital", "Paris")])
    assert LlamaIndexLLM(llm, instrument="always").generate("the capital?").text == "Paris"
    assert asked == []
    assert LlamaIndexLLM(llm).generate("the capital?").text == "Paris"
    assert asked == ["complete"]
    with pytest.raises(ValueError, match="instrument"):
        LlamaIndexLLM(llm, instrument="never")  # type: ignore[arg-type]


def test_a_method_without_llamaindexs_span_is_called_as_it_is(make_llm, monkeypatch) -> None:
    llm = make_llm()

    def patched(self: Any, prompt: str, **kwargs: Any) -> Any:  # an instrumentor's patch, say
        return CompletionResponse(text="patched")

    monkeypatch.setattr(type(llm), "complete", patched)
    assert _quiet._inside_span(llm, "complete") is None
    assert LlamaIndexLLM(llm).generate("anything").text == "patched"
    inner = inspect.getattr_static(Letters, "_retrieve").__wrapped__  # (a user's retriever: its span)
    assert _quiet._inside_span(Letters(), "_retrieve") is inner


def test_a_query_embeddings_span_reaches_a_handler_on_its_models_module(index) -> None:
    backend = as_backend(index)
    model = type(index._embed_model)
    for use_async in (False, True):
        with span_handler(model.__module__) as spans:
            assert _quiet.unobserved(backend.retriever_for(2)) == _quiet.DEEP  # (the retrieval itself is)
            asyncio.run(backend.aretrieve("Paris", 2)) if use_async else backend.retrieve("Paris", 2)
        method = "_aget_query_embedding" if use_async else "_get_query_embedding"
        assert _span_names(spans) == [f"{model.__name__}.{method}"]


class CountingLimiter:
    """A rate limiter (``llm_completion_callback`` awaits it before each async call)."""

    def __init__(self) -> None:
        self.acquired = 0

    async def async_acquire(self) -> None:
        self.acquired += 1

    def acquire(self) -> None:
        self.acquired += 1


def _payloads(monkeypatch: pytest.MonkeyPatch, llm: Any) -> list[int]:
    """Counts the LLM's serialisations for event payloads (one per call that sends events)."""
    made: list[int] = []
    payload = type(llm).to_payload
    monkeypatch.setattr(type(llm), "to_payload", lambda self, **kw: made.append(1) or payload(self, **kw))
    return made


def test_llm_calls_that_nothing_observes_send_no_completion_events(
    make_llm, monkeypatch, root_handler
) -> None:
    llm = make_llm([("capital", "Paris")])
    made = _payloads(monkeypatch, llm)
    adapter = LlamaIndexLLM(llm)
    root = instrument.get_dispatcher()
    root.event_handlers.remove(root_handler)  # nothing observes
    try:
        assert asyncio.run(adapter.agenerate("the capital?")).text == "Paris"
        assert adapter.generate("the capital?").text == "Paris"
    finally:
        root.add_event_handler(root_handler)
    assert made == [] and root_handler.seen == []
    assert asyncio.run(adapter.agenerate("the capital?")).text == "Paris"  # now the root handler listens
    assert adapter.generate("the capital?").text == "Paris"
    assert root_handler.seen.count("LLMCompletionStartEvent") == 2
    assert root_handler.seen.count("LLMCompletionEndEvent") == 2
    assert made == [1, 1]
    assert LlamaIndexLLM(llm, instrument="always").generate("the capital?").text == "Paris"
    assert made == [1, 1, 1]


def test_an_llms_rate_limiter_is_applied_on_every_call(make_llm) -> None:
    limiter = CountingLimiter()
    llm = make_llm([("capital", "Paris")], rate_limiter=limiter)
    adapter = LlamaIndexLLM(llm)
    assert asyncio.run(adapter.agenerate("the capital?")).text == "Paris"
    assert adapter.generate("the capital?").text == "Paris"
    assert limiter.acquired == 2


def test_the_llm_authors_own_decorators_run_on_every_call(monkeypatch) -> None:
    seen: list[str] = []

    def logged(fn: Any) -> Any:  # (no functools.wraps: LlamaIndex would then send no events at all)
        async def inner(self: Any, prompt: str, **kwargs: Any) -> Any:
            seen.append(prompt)
            return await fn(self, prompt, **kwargs)

        return inner

    class Logged(ScriptedLLM):
        @llm_completion_callback()
        @logged
        async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            return CompletionResponse(text="logged")

    llm = Logged()
    made = _payloads(monkeypatch, llm)
    assert asyncio.run(LlamaIndexLLM(llm).agenerate("hello")).text == "logged"
    assert seen == ["hello"] and made == []  # (the events were left out, the decorator was not)


class SpanIds(BaseEventHandler):
    seen: list[tuple[str, str | None]]

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.seen.append((event.class_name(), event.span_id))


def test_a_handler_on_the_completion_events_dispatcher_alone_sees_them_in_a_span(make_llm) -> None:
    """Its dispatcher is not the LLM span's: the span is left out, but the events name a
    span id of its form, one per call, as LlamaIndex's would."""
    llm = make_llm([("capital", "Paris")])
    handler = SpanIds(seen=[])
    dispatcher = instrument.get_dispatcher(llm_completion_callback.__module__)
    dispatcher.add_event_handler(handler)
    try:
        for _ in range(2):
            assert asyncio.run(LlamaIndexLLM(llm).agenerate("the capital?")).text == "Paris"
    finally:
        dispatcher.event_handlers.remove(handler)
    assert [name for name, _ in handler.seen] == ["LLMCompletionStartEvent", "LLMCompletionEndEvent"] * 2
    ids = [span_id for _, span_id in handler.seen]
    assert all(re.fullmatch(r"ScriptedLLM\.acomplete-[0-9a-f-]{36}", str(i)) for i in ids)
    assert ids[0] == ids[1] != ids[2] == ids[3]


@pytest.mark.parametrize("instrument_mode", ["always", "observed"])
def test_spans_inside_a_users_retriever_name_its_span_as_their_parent(instrument_mode) -> None:
    llm = MockLLM(max_tokens=2)

    class Rewriting(BaseRetriever):  # its _retrieve calls an LLM (a query rewrite, say)
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            text = llm.complete(query_bundle.query_str).text
            return [NodeWithScore(node=TextNode(text=text, id_="n"), score=1.0)]

    with span_handler(type(llm).__module__) as spans:  # (not the retriever span's dispatcher)
        assert as_backend(Rewriting(), instrument=instrument_mode).retrieve("a query", 1)
    [span] = spans.completed_spans
    assert span.id_.startswith("MockLLM.complete-")
    assert re.fullmatch(r"Rewriting\._retrieve-[0-9a-f-]{36}", str(span.parent_id))


class Failing(ScriptedLLM):
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise RuntimeError("quota exceeded")


@pytest.mark.parametrize("instrument_mode", ["always", "observed"])
def test_a_failed_call_reaches_an_outer_callback_trace_as_llamaindexs_own_does(instrument_mode) -> None:
    """``llm_completion_callback``'s trace marks the exception as recorded, so an outer
    trace of the caller's records no EXCEPTION event of its own."""
    debug = LlamaDebugHandler()
    with pytest.raises(RuntimeError) as raised, CallbackManager([debug]).as_trace("app"):
        LlamaIndexLLM(Failing(), instrument=instrument_mode).generate("hi")
    assert getattr(raised.value, "event_added", False) is True
    assert debug.get_events(CBEventType.EXCEPTION) == []


def test_llm_classes_made_at_run_time_are_not_kept_alive() -> None:
    made = []
    for i in range(3):

        class Made(ScriptedLLM):
            @llm_completion_callback()
            def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
                return super().complete(prompt, formatted, **kwargs)

        assert LlamaIndexLLM(Made(default=f"made {i}")).generate("hi").text == f"made {i}"
        made.append(weakref.ref(Made))
        del Made
    gc.collect()
    assert [ref() for ref in made] == [None, None, None]


def test_only_the_wrappers_of_the_llamaindex_version_read_are_left_out(monkeypatch) -> None:
    """The pinned llama-index-core's wrappers are the ones read: a test run against another
    version says so here (read what they do, then update ``_quiet._READ``)."""
    assert _quiet._SPAN_CODES and _quiet._COMPLETION_CODES
    monkeypatch.setitem(_quiet._READ, "llm_completion_callback", "another")
    assert _quiet._completion_codes() == frozenset()


class SubEngine(BaseQueryEngine):
    def __init__(self) -> None:
        super().__init__(callback_manager=None)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    def _query(self, query_bundle: QueryBundle) -> Response:
        return Response("sub answer")

    async def _aquery(self, query_bundle: QueryBundle) -> Response:
        return Response("sub answer")


class PointsToAnEngine(BaseRetriever):
    """One ``IndexNode`` whose object is a query engine (followed by the recursive retrieval)."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        node = IndexNode(text="see the engine", id_="i", index_id="sub", obj=SubEngine())
        return [NodeWithScore(node=node, score=1.0)]


@pytest.mark.parametrize("instrument_mode", ["always", "observed"])
@pytest.mark.parametrize("use_async", [False, True])
def test_a_recursive_retrievals_spans_name_the_retrieval_as_their_parent(instrument_mode, use_async) -> None:
    backend = as_backend(PointsToAnEngine(), instrument=instrument_mode)
    with span_handler(BaseQueryEngine.__module__) as spans:  # (not the retrieval span's dispatcher)
        found = asyncio.run(backend.aretrieve("a query", 1)) if use_async else backend.retrieve("a query", 1)
    assert [d.text for d in found] == ["sub answer"]
    [span] = spans.completed_spans
    method = "aretrieve" if use_async else "retrieve"
    assert span.id_.startswith("SubEngine.aquery-" if use_async else "SubEngine.query-")
    assert re.fullmatch(rf"PointsToAnEngine\.{method}-[0-9a-f-]{{36}}", str(span.parent_id))


def test_the_span_wrappers_are_recognised_whatever_has_been_patched(monkeypatch) -> None:
    monkeypatch.setattr(BaseRetriever, "retrieve", lambda self, query: [])  # (before import, it broke it)
    assert _quiet._span_codes() == _quiet._SPAN_CODES != frozenset()


@pytest.mark.parametrize("instrument_mode", ["always", "observed"])
def test_a_failed_call_leaves_the_callback_trace_stack_as_llamaindexs_own_does(instrument_mode) -> None:
    with CallbackManager([LlamaDebugHandler()]).as_trace("app"):
        with pytest.raises(RuntimeError):
            LlamaIndexLLM(Failing(), instrument=instrument_mode).generate("hi")
        assert len(global_stack_trace.get()) == 2  # (LlamaIndex's EXCEPTION event stays on it)
