import asyncio
import json
import time

import pytest
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.query_engine import RouterQueryEngine, SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.response_synthesizers import get_response_synthesizer
from llama_index.core.schema import QueryBundle
from llama_index.core.selectors import LLMSingleSelector
from llama_index.core.tools import QueryEngineTool

from selfrag_core.config import SelfHealingRAGConfig
from selfrag_core.strategies import HyDERAG, RecursiveRAG, SelfHealingRAG, SelfIRAG
from selfrag_llamaindex import LlamaIndexLLM, SelfRAGQueryEngine, as_backend

from .li_fakes import HEALING_RULES, HYDE_RULES, RECURSIVE_RULES, SELF_RAG_RULES

pytestmark = pytest.mark.integration

FRANCE = "What is the capital of France?"
BOTH = "Compare the capitals of France and Spain: how do they differ and why?"


def engine(strategy_cls, llm, index, **kwargs):
    return SelfRAGQueryEngine.from_llamaindex(strategy_cls, llm=llm, retriever=index, **kwargs)


def test_self_rag_response_has_answer_nodes_and_scores(make_llm, index) -> None:
    response = engine(SelfIRAG, make_llm(SELF_RAG_RULES), index).query(FRANCE)
    assert isinstance(response, Response)
    assert str(response) == "Paris is the capital of France."
    assert response.source_nodes[0].node_id == "paris"
    assert response.source_nodes[0].score is not None
    meta = response.metadata
    assert meta["strategy"] == "SelfIRAG" and meta["confidence"] == pytest.approx(0.9)
    assert meta["history"][0]["evaluation"]["relevance"] == pytest.approx(0.9)
    assert meta["trace"]["llm_calls"] == 1 and meta["fallbacks"] == []
    assert "answer" not in meta and "sources" not in meta


def test_hyde_metadata_holds_the_hypothetical_documents(make_llm, index) -> None:
    response = engine(HyDERAG, make_llm(HYDE_RULES), index, num_hypothetical_docs=2).query(FRANCE)
    assert str(response) == "Paris is the capital of France."
    assert response.metadata["hypothetical_docs"] == ["Paris is the capital of France, on the Seine."] * 2
    assert response.source_nodes[0].node_id == "paris"


def test_recursive_metadata_holds_the_sub_questions(make_llm, index) -> None:
    response = engine(RecursiveRAG, make_llm(RECURSIVE_RULES), index).query(BOTH)
    assert response.metadata["sub_questions"] == [
        "What is the capital of France?",
        "What is the capital of Spain?",
    ]
    assert [s["answer"] for s in response.metadata["sub_answers"]] == [
        "Paris is the capital of France.", "Madrid is the capital of Spain.",
    ]  # fmt: skip
    assert {"paris", "madrid"} <= {n.node_id for n in response.source_nodes}


def test_self_healing_report_becomes_a_response(make_llm, index) -> None:
    llm = LlamaIndexLLM(make_llm(HEALING_RULES))
    strategy = SelfHealingRAG(llm, [as_backend(index)], config=SelfHealingRAGConfig(confidence_threshold=0.5))
    response = SelfRAGQueryEngine(strategy=strategy, context={"top_k": 2}).query(FRANCE)
    assert str(response) == "Paris is the capital of France."
    assert response.metadata["success"] is True and response.metadata["scores"] == [1.0]
    assert len(response.source_nodes) == 2


def test_not_a_strategy_is_refused(make_llm) -> None:
    with pytest.raises((TypeError, ValueError), match="not a selfrag strategy"):
        SelfRAGQueryEngine(strategy=make_llm())


def test_query_bundle_with_custom_embedding_strs_uses_the_query_and_says_so(make_llm, index) -> None:
    bundle = QueryBundle(FRANCE, custom_embedding_strs=["Seine river city"])
    response = engine(SelfIRAG, make_llm(SELF_RAG_RULES), index).query(bundle)
    assert str(response) == "Paris is the capital of France."
    assert response.metadata["fallbacks"] == ["custom_embedding_strs_ignored"]
    assert response.metadata["adapter_notes"][0]["detail"]["custom_embedding_strs"] == ["Seine river city"]


def test_query_bundle_with_an_image_uses_the_text_and_says_so(make_llm, index) -> None:
    response = engine(SelfIRAG, make_llm(SELF_RAG_RULES), index).query(
        QueryBundle(FRANCE, image_path="map.png")
    )
    assert str(response) == "Paris is the capital of France."
    assert response.metadata["fallbacks"] == ["image_path_ignored"]
    assert response.metadata["adapter_notes"][0]["detail"] == {"image_path": "map.png"}


def test_a_failed_structured_predict_is_listed_in_the_fallbacks(make_llm, index) -> None:
    from llama_index.core.types import PydanticProgramMode

    llm = make_llm([*RECURSIVE_RULES[1:], ("SUBQUESTIONS:", "no JSON here")])
    llm.pydantic_program_mode = PydanticProgramMode.LLM  # structured_predict, which fails to parse
    response = engine(RecursiveRAG, llm, index).query(BOTH)
    assert "structured_predict_failed" in response.metadata["fallbacks"]
    note = next(n for n in response.metadata["adapter_notes"] if n["name"] == "structured_predict_failed")
    assert "ScriptedLLM" in note["error"] and "plain completion" in note["error"]


async def test_aquery_runs_concurrently_on_the_event_loop(make_llm, index) -> None:
    qe = engine(SelfIRAG, make_llm(SELF_RAG_RULES, latency=0.3), index)
    start = time.perf_counter()
    responses = await asyncio.gather(*(qe.aquery(FRANCE) for _ in range(4)))
    elapsed = time.perf_counter() - start
    assert [str(r) for r in responses] == ["Paris is the capital of France."] * 4
    assert elapsed < 0.9, f"4 one-call queries took {elapsed:.2f}s; sequential would take 1.2s"


async def test_aquery_does_not_block_the_loop(make_llm, index) -> None:
    qe = engine(SelfIRAG, make_llm(SELF_RAG_RULES, latency=0.3), index)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    task = asyncio.create_task(ticker())
    await qe.aquery(FRANCE)
    task.cancel()
    assert ticks >= 5  # a blocking call would have starved the ticker


def test_streaming_sync(make_llm, index) -> None:
    response = engine(SelfIRAG, make_llm(SELF_RAG_RULES), index, streaming=True).query(FRANCE)
    assert isinstance(response, StreamingResponse)
    chunks = list(response.response_gen)  # SelfIRAG picks its answer at the end: one piece
    assert "".join(chunks) == "Paris is the capital of France."
    assert response.source_nodes[0].node_id == "paris" and response.metadata["strategy"] == "SelfIRAG"


def test_streaming_forwards_the_llms_tokens(make_llm, index) -> None:
    response = engine(HyDERAG, make_llm(HYDE_RULES), index, streaming=True).query(FRANCE)
    assert isinstance(response, StreamingResponse) and response.source_nodes == []  # filled at the end
    chunks = list(response.response_gen)
    assert len(chunks) > 1  # word by word, as the LLM's stream_complete produced them
    assert "".join(chunks).strip() == engine(HyDERAG, make_llm(HYDE_RULES), index).query(FRANCE).response
    assert response.source_nodes and response.metadata["strategy"] == "HyDERAG"


def test_streamed_answers_keep_the_token_counts_of_the_last_chunk(make_llm, index) -> None:
    from llama_index.core.base.llms.types import CompletionResponse

    from .li_fakes import ScriptedLLM

    class UsageAtTheEnd(ScriptedLLM):
        """Like OpenAI's ``include_usage``: the counts come in a last, empty chunk."""

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):  # type: ignore[no-untyped-def]
            chunks = list(super().stream_complete(prompt, formatted, **kwargs))
            usage = {"prompt_tokens": 321, "completion_tokens": len(chunks)}
            return iter([*chunks, CompletionResponse(text=chunks[-1].text, delta="", raw={"usage": usage})])

    llm = UsageAtTheEnd(rules=HYDE_RULES)
    response = engine(HyDERAG, llm, index, streaming=True).query(FRANCE)
    assert "".join(response.response_gen).strip() == "Paris is the capital of France."
    answer = [e for e in response.metadata["trace"]["events"] if e["name"] == "answer"]
    assert [(e["input_tokens"], e["output_tokens"]) for e in answer] == [(321, 6)]


def _breaking_once(retry_text: str | None = None):  # type: ignore[no-untyped-def]
    """A scripted LLM whose first answer stream breaks after two words; its retry streams
    the same answer (a deterministic model) or ``retry_text``."""
    from llama_index.core.base.llms.types import CompletionResponse

    from .li_fakes import ScriptedLLM

    class BreakingOnce(ScriptedLLM):
        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs):  # type: ignore[no-untyped-def]
            broken = self.__dict__.setdefault("_broken", [])
            chunks = list(super().stream_complete(prompt, formatted, **kwargs))
            if "from these documents only" not in prompt:
                return iter(chunks)
            if not broken:
                broken.append(True)

                def cut():  # type: ignore[no-untyped-def]
                    yield from chunks[:2]
                    raise ConnectionError("stream lost")

                return cut()
            if retry_text is None:
                return iter(chunks)
            return iter([CompletionResponse(text=retry_text, delta=retry_text)])

    return BreakingOnce(rules=HYDE_RULES)


def test_a_stream_retried_after_a_break_is_sent_once(index) -> None:
    response = engine(HyDERAG, _breaking_once(), index, streaming=True).query(FRANCE)
    assert "".join(response.response_gen) == "Paris is the capital of France. "
    assert "stream_restarted" not in response.metadata["fallbacks"] and "answer" not in response.metadata


async def test_a_retry_that_differs_comes_after_a_blank_line_and_is_in_the_metadata(index) -> None:
    qe = engine(HyDERAG, _breaking_once("France's capital is Paris."), index, streaming=True)
    response = await qe.aquery(FRANCE)
    text = "".join([c async for c in response.async_response_gen()])
    assert text == "Paris is \n\nFrance's capital is Paris."
    assert response.metadata["answer"] == "France's capital is Paris."
    assert "stream_restarted" in response.metadata["fallbacks"]


async def test_streaming_async_forwards_tokens(make_llm, index) -> None:
    response = await engine(HyDERAG, make_llm(HYDE_RULES), index, streaming=True).aquery(FRANCE)
    chunks = [c async for c in response.async_response_gen()]
    assert len(chunks) > 1 and response.source_nodes


async def test_streaming_async(make_llm, index) -> None:
    response = await engine(SelfIRAG, make_llm(SELF_RAG_RULES), index, streaming=True).aquery(FRANCE)
    assert isinstance(response, AsyncStreamingResponse)
    chunks = [c async for c in response.async_response_gen()]
    assert "".join(chunks) == "Paris is the capital of France."


def test_interleaved_streams_leave_no_query_active_in_the_consumers_context(make_llm, index) -> None:
    """Each stream sets its query's context variables around its own steps only: after two
    interleaved streams, a call outside any query reports to neither engine's handlers."""
    from selfrag_core.engine import _TRACE_LISTENER
    from selfrag_llamaindex import _events

    handlers = [LlamaDebugHandler(print_trace_on_end=False) for _ in range(2)]
    engines = [
        engine(HyDERAG, make_llm(HYDE_RULES), index, streaming=True, callback_manager=CallbackManager([h]))
        for h in handlers
    ]
    responses = [e.query(FRANCE) for e in engines]
    first, second = (r.response_gen for r in responses)
    begun = [next(first), next(second)]
    texts = [begun[0] + "".join(first), begun[1] + "".join(second)]
    assert [t.strip() for t in texts] == ["Paris is the capital of France."] * 2
    assert _events._ACTIVE.get() is None and _TRACE_LISTENER.get() is None
    seen = [len(h.get_llm_inputs_outputs()) for h in handlers]
    assert seen == [r.metadata["trace"]["llm_calls"] for r in responses]  # each engine its own calls
    LlamaIndexLLM(make_llm()).generate("a call outside any query")
    assert [len(h.get_llm_inputs_outputs()) for h in handlers] == seen


def test_an_abandoned_async_stream_closes_cleanly_and_ends_its_query_event(make_llm, index) -> None:
    debug = LlamaDebugHandler(print_trace_on_end=False)
    manager = CallbackManager([debug])
    qe = engine(HyDERAG, make_llm(HYDE_RULES), index, streaming=True, callback_manager=manager)
    problems: list[dict] = []

    async def main() -> str:
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: problems.append(context))
        response = await qe.aquery(FRANCE)
        async for chunk in response.async_response_gen():
            return chunk  # the consumer goes away after one chunk
        return ""

    assert asyncio.run(main()) == "Paris "
    assert problems == []  # closing the generator from another context used to raise
    assert len(debug.get_event_pairs(CBEventType.QUERY)) == 1


def test_debug_handler_sees_query_retrievals_llm_calls_and_sub_questions(make_llm, index) -> None:
    debug = LlamaDebugHandler(print_trace_on_end=False)
    qe = engine(RecursiveRAG, make_llm(RECURSIVE_RULES), index, callback_manager=CallbackManager([debug]))
    qe.query(BOTH)
    assert len(debug.get_event_pairs(CBEventType.QUERY)) == 1
    retrieved = [p[0].payload["query_str"] for p in debug.get_event_pairs(CBEventType.RETRIEVE)]
    assert sorted(retrieved) == ["What is the capital of France?", "What is the capital of Spain?"]
    llm_prompts = [p[0].payload["formatted_prompt"] for p in debug.get_llm_inputs_outputs()]
    assert len(llm_prompts) == 4 and llm_prompts[0].startswith("SUBQUESTIONS:")
    assert {p[0].payload["model_name"] for p in debug.get_llm_inputs_outputs()} == {"scripted"}
    completions = [p[1].payload["completion"] for p in debug.get_llm_inputs_outputs()]
    assert "Madrid is the capital of Spain." in completions
    pairs = debug.get_event_pairs(CBEventType.SUB_QUESTION)
    subs = sorted(start.payload["sub_question"].sub_q.sub_question for start, _ in pairs)
    assert subs == ["What is the capital of France?", "What is the capital of Spain?"]
    answers = sorted(end.payload["sub_question"].answer for _, end in pairs)
    assert answers == ["Madrid is the capital of Spain.", "Paris is the capital of France."]
    # live, as LlamaIndex's own engine does: asked and answered before the merge call starts
    order = [(e.event_type, e.id_) for e in debug.get_events()]
    merge_start = max(i for i, (kind, _) in enumerate(order) if kind is CBEventType.LLM)
    merge_start = min(i for i, (kind, id_) in enumerate(order) if id_ == order[merge_start][1])
    sub_events = [i for i, (kind, _) in enumerate(order) if kind is CBEventType.SUB_QUESTION]
    assert len(sub_events) == 4 and max(sub_events) < merge_start


async def test_debug_handler_sees_async_calls_too(make_llm, index) -> None:
    debug = LlamaDebugHandler(print_trace_on_end=False)
    qe = engine(RecursiveRAG, make_llm(RECURSIVE_RULES), index, callback_manager=CallbackManager([debug]))
    await qe.aquery(BOTH)
    assert len(debug.get_event_pairs(CBEventType.RETRIEVE)) == 2
    assert len(debug.get_llm_inputs_outputs()) == 4


@pytest.mark.parametrize("use_async", [False, True])
def test_a_handler_set_in_settings_sees_each_call_once(make_llm, use_async) -> None:
    """With the handler in ``Settings.callback_manager``, the LLM, the retriever and our
    engine each hold a manager with it: each call must reach it once, not once per manager."""
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.schema import TextNode

    from .li_fakes import CORPUS, HashEmbedding

    debug = LlamaDebugHandler(print_trace_on_end=False)
    before = Settings.callback_manager
    Settings.callback_manager = CallbackManager([debug])
    try:
        index = VectorStoreIndex([TextNode(text=t, id_=i) for i, t in CORPUS], embed_model=HashEmbedding())
        llm = make_llm(RECURSIVE_RULES)
        assert llm.callback_manager is not Settings.callback_manager  # each holds its own manager
        debug.flush_event_logs()
        qe = engine(RecursiveRAG, llm, index)
        response = asyncio.run(qe.aquery(BOTH)) if use_async else qe.query(BOTH)
    finally:
        Settings.callback_manager = before
    trace = response.metadata["trace"]
    assert trace["llm_calls"] == 4 and trace["retrievals"] == 2
    assert len(debug.get_llm_inputs_outputs()) == 4
    assert len(debug.get_event_pairs(CBEventType.RETRIEVE)) == 2
    assert len(debug.get_event_pairs(CBEventType.SUB_QUESTION)) == 2
    assert len(debug.get_event_pairs(CBEventType.QUERY)) == 1


def test_a_global_handler_sees_each_call_once_beside_partly_shared_handlers(make_llm, index) -> None:
    """LlamaIndex adds its ``global_handler`` to every callback manager made after it is
    set: the engine's then holds [shared, global], the LLM's (made before) only [shared]."""
    import llama_index.core
    from llama_index.core.callbacks.base_handler import BaseCallbackHandler

    class Everywhere(BaseCallbackHandler):  # not a LlamaDebugHandler: one per type and manager
        def __init__(self) -> None:
            super().__init__([], [])
            self.llm_starts = 0

        def on_event_start(self, event_type, payload=None, event_id="", parent_id="", **kwargs):  # type: ignore[no-untyped-def]
            self.llm_starts += event_type is CBEventType.LLM
            return event_id

        def on_event_end(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            pass

        def start_trace(self, trace_id=None) -> None:  # type: ignore[no-untyped-def]
            pass

        def end_trace(self, trace_id=None, trace_map=None) -> None:  # type: ignore[no-untyped-def]
            pass

    shared, everywhere = LlamaDebugHandler(print_trace_on_end=False), Everywhere()
    llm = make_llm(HYDE_RULES, callback_manager=CallbackManager([shared]))
    before = llama_index.core.global_handler
    llama_index.core.global_handler = everywhere
    try:
        qe = engine(HyDERAG, llm, index, callback_manager=CallbackManager([shared]))
        response = qe.query(FRANCE)
    finally:
        llama_index.core.global_handler = before
    assert str(response) == "Paris is the capital of France." and response.metadata["fallbacks"] == []
    calls = response.metadata["trace"]["llm_calls"]
    assert len(shared.get_llm_inputs_outputs()) == calls == everywhere.llm_starts


def test_instrumentation_sees_the_query_span_and_the_llm_events(make_llm, index) -> None:
    import llama_index.core.instrumentation as instrument
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    seen: list[str] = []

    class Collect(BaseEventHandler):
        def handle(self, event, **kwargs) -> None:
            seen.append(event.class_name())

    root = instrument.get_dispatcher()
    handler = Collect()
    root.add_event_handler(handler)
    try:
        engine(SelfIRAG, make_llm(SELF_RAG_RULES), index).query(FRANCE)
    finally:
        root.event_handlers.remove(handler)
    for name in ("QueryStartEvent", "RetrievalStartEvent", "LLMCompletionStartEvent", "QueryEndEvent"):
        assert name in seen


@pytest.mark.parametrize("use_async", [False, True])
def test_llamaindexs_spans_nest_under_the_query_span(make_llm, index, use_async) -> None:
    """The LLM calls and retrievals go through LlamaIndex's public methods, so their spans
    (and the embedding's inside the retrieval) are children of the engine's query span."""
    import llama_index.core.instrumentation as instrument
    from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler

    spans = SimpleSpanHandler()
    root = instrument.get_dispatcher()
    root.add_span_handler(spans)
    try:
        qe = engine(RecursiveRAG, make_llm(RECURSIVE_RULES), index)
        asyncio.run(qe.aquery(BOTH)) if use_async else qe.query(BOTH)
    finally:
        root.span_handlers.remove(spans)
    by_id = {span.id_: span for span in spans.completed_spans}

    def name(span_id: str) -> str:
        return span_id.rsplit("-", 5)[0]

    def ancestors(span_id: str) -> list[str]:
        chain, parent = [], by_id[span_id].parent_id
        while parent in by_id:
            chain.append(name(parent))
            parent = by_id[parent].parent_id
        return chain

    a = "a" if use_async else ""
    query = f"SelfRAGQueryEngine.{a}query"
    names = [name(i) for i in by_id]
    assert names.count(query) == 1
    assert (
        names.count(f"ScriptedLLM.{a}complete") == 4 and names.count(f"VectorIndexRetriever.{a}retrieve") == 2
    )
    for span_id in by_id:
        if name(span_id) != query:
            assert ancestors(span_id)[-1] == query


def _router(make_llm, index) -> RouterQueryEngine:
    """A router whose scripted selector picks tool 2 (ours) over tool 1 (another engine)."""
    other = engine(SelfIRAG, make_llm([], default="wrong tool"), index)
    ours = engine(SelfIRAG, make_llm(SELF_RAG_RULES), index)
    choice = json.dumps([{"choice": 2, "reason": "capitals"}])
    selector_llm = make_llm([("Using only the choices above", choice)])
    return RouterQueryEngine(
        selector=LLMSingleSelector.from_defaults(llm=selector_llm),
        query_engine_tools=[
            QueryEngineTool.from_defaults(
                query_engine=other, name="weather", description="Weather forecasts."
            ),
            QueryEngineTool.from_defaults(
                query_engine=ours, name="capitals", description="Capitals of Europe."
            ),
        ],
        llm=selector_llm,
    )


def test_router_query_engine_routes_to_our_engine(make_llm, index) -> None:
    response = _router(make_llm, index).query(FRANCE)
    assert str(response) == "Paris is the capital of France."
    assert response.source_nodes[0].node_id == "paris"
    assert response.metadata["strategy"] == "SelfIRAG"


async def test_router_query_engine_async(make_llm, index) -> None:
    response = await _router(make_llm, index).aquery(FRANCE)
    assert str(response) == "Paris is the capital of France."
    assert response.metadata["strategy"] == "SelfIRAG"


@pytest.mark.parametrize("use_async", [False, True])
def test_sub_question_query_engine_uses_our_engine_as_a_tool(make_llm, index, use_async) -> None:
    items = {"items": [{"sub_question": FRANCE, "tool_name": "capitals"}]}
    planner = make_llm(
        [("<Tools>", "```json\n" + json.dumps(items) + "\n```"), ("Paris is the capital", "Final: Paris.")]
    )
    ours = engine(SelfIRAG, make_llm(SELF_RAG_RULES), index)
    debug = LlamaDebugHandler(print_trace_on_end=False)
    sub = SubQuestionQueryEngine.from_defaults(
        query_engine_tools=[QueryEngineTool.from_defaults(ours, name="capitals", description="Capitals.")],
        llm=planner,
        question_gen=LLMQuestionGenerator.from_defaults(llm=planner),
        response_synthesizer=get_response_synthesizer(llm=planner),
        use_async=use_async,
        verbose=False,
    )
    sub.callback_manager = CallbackManager([debug])
    response = sub.query("Tell me about France.")
    assert str(response) == "Final: Paris."
    [(_, end)] = debug.get_event_pairs(CBEventType.SUB_QUESTION)
    pair = end.payload["sub_question"]
    assert pair.answer == "Paris is the capital of France."
    assert pair.sources[0].node_id == "paris"  # our source nodes, ids kept


async def test_one_engine_shared_by_two_users_never_mixes_their_conversations(make_llm, index) -> None:
    """A query engine is built once and shared by every user (issue 16 §5): user B's
    prompts never carry user A's question or answer."""
    llm = make_llm(HEALING_RULES)
    shared = SelfRAGQueryEngine(strategy=SelfHealingRAG(LlamaIndexLLM(llm), [as_backend(index)]))
    secret = "What is the secret project code name of Alice?"
    shared.query(secret)
    before = len(llm.prompts)
    await asyncio.gather(shared.aquery(FRANCE), asyncio.to_thread(shared.query, "Where does the Seine flow?"))
    later = llm.prompts[before:]
    assert later and not any("secret project" in p or "Conversation so far" in p for p in later)


async def test_a_strategy_of_ones_own_answers_as_a_query_engine(make_llm, index) -> None:
    """The guide's example (examples/corrective_rag.py) over a real index and LLM: query,
    aquery and streaming, and inside SelfHealingRAG (issue 17)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "corrective_rag.py"
    spec = importlib.util.spec_from_file_location("corrective_rag_li", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    answer = "Paris is the capital of France."
    llm = LlamaIndexLLM(
        make_llm([("Is the document", "yes"), ("factual claims", HEALING_RULES[0][1])], default=answer)
    )
    ours = module.CorrectiveRAG(as_backend(index), llm, top_k=2)
    response = SelfRAGQueryEngine(strategy=ours).query(FRANCE)
    assert str(response) == answer and len(response.source_nodes) == 2
    assert str(await SelfRAGQueryEngine(strategy=ours).aquery(FRANCE)) == answer
    streamed = SelfRAGQueryEngine(strategy=ours, streaming=True).query(FRANCE)
    assert "".join(streamed.response_gen).strip() == answer
    healer = SelfHealingRAG(llm, [ours], config=SelfHealingRAGConfig(confidence_threshold=0.0))
    assert str(SelfRAGQueryEngine(strategy=healer).query(FRANCE)) == answer
