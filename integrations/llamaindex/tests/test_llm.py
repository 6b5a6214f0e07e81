import json
import logging
from typing import Any

import pytest
from llama_index.core import Settings
from llama_index.core.llms import MockLLM
from llama_index.core.types import PydanticProgramMode

from selfrag_core import ExecutionConfig, LLMOutput
from selfrag_core.prompts import EVALUATION_SCHEMA
from selfrag_core.strategies import SelfIRAG
from selfrag_core.testing import FakeLLM
from selfrag_llamaindex import LlamaIndexLLM, SelfRAGQueryEngine, as_backend
from selfrag_llamaindex._convert import llm_output, model_from_schema

from .li_fakes import SELF_RAG_RULES

pytestmark = pytest.mark.integration

NO_WAIT = ExecutionConfig(retry_initial_wait=0.0, retry_max_wait=0.0)


def test_llm_is_required_and_settings_llm_is_never_used() -> None:
    Settings.llm = MockLLM()
    try:
        with pytest.raises(ValueError, match=r"Settings\.llm"):
            LlamaIndexLLM(None)
    finally:
        Settings._llm = None


def test_a_non_llamaindex_llm_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"llama_index\.core\.llms\.LLM"):
        LlamaIndexLLM(FakeLLM("x"))


def test_mock_llm_echoes_the_exact_prompt_braces_included() -> None:
    prompt = 'Context: {"key": {value}} and {0} and {question}\nQuestion: what?'
    out = LlamaIndexLLM(MockLLM()).generate(prompt)
    assert out.text == prompt  # nothing formatted the braces


async def test_async_generate_uses_acomplete(make_llm) -> None:
    llm = make_llm([("hello", "world")])
    out = await LlamaIndexLLM(llm).agenerate("say hello")
    assert out == LLMOutput("world", input_tokens=2, output_tokens=1)
    assert llm.prompts == ["say hello"]


def test_token_counts_from_raw_usage_and_additional_kwargs() -> None:
    from llama_index.core.base.llms.types import CompletionResponse

    openai_like = CompletionResponse(text="a", raw={"usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    assert llm_output(openai_like) == LLMOutput("a", 7, 3)
    kwargs_only = CompletionResponse(text="b", additional_kwargs={"prompt_tokens": 5, "completion_tokens": 2})
    assert llm_output(kwargs_only) == LLMOutput("b", 5, 2)
    assert llm_output(CompletionResponse(text="c")) == LLMOutput("c")


def test_structured_predict_when_the_llm_declares_a_program_mode(make_llm) -> None:
    reply = json.dumps({"relevance": 8, "accuracy": 7, "completeness": 9, "clarity": 8, "issues": ["x"],
                        "suggestions": []})  # fmt: skip
    llm = make_llm([("Rate", reply)], pydantic_program_mode=PydanticProgramMode.LLM)
    wrapped = LlamaIndexLLM(llm)
    assert wrapped.structured
    out = wrapped.generate_structured("Rate this {braced} text", EVALUATION_SCHEMA)
    assert json.loads(out.text)["accuracy"] == 7
    assert "Rate this {braced} text" in llm.prompts[0]  # the prompt went through verbatim
    assert "relevance" in llm.prompts[0] and llm.prompts[0] != "Rate this {braced} text"  # schema added


def test_structured_failure_falls_back_to_plain_completion_and_logs(make_llm, caplog) -> None:
    llm = make_llm([("Rate", "not json at all")], pydantic_program_mode=PydanticProgramMode.LLM)
    with caplog.at_level(logging.WARNING, logger="selfrag"):
        out = LlamaIndexLLM(llm).generate_structured("Rate it", EVALUATION_SCHEMA)
    assert out.text == "not json at all"
    assert llm.prompts[-1] == "Rate it"
    assert "structured_predict failed" in caplog.text


def test_plain_llms_get_plain_completions_for_json_steps(make_llm) -> None:
    llm = make_llm([("Rate", "{}")])
    wrapped = LlamaIndexLLM(llm)
    assert not wrapped.structured
    assert wrapped.generate_structured("Rate it", EVALUATION_SCHEMA).text == "{}"
    assert llm.prompts == ["Rate it"]


def test_model_from_schema_requires_the_required_fields() -> None:
    model = model_from_schema(EVALUATION_SCHEMA)
    with pytest.raises(ValueError):
        model(relevance=1)
    ok = model(relevance=1, accuracy=2, completeness=3, clarity=4, issues=[], suggestions=["s"])
    assert ok.suggestions == ["s"]


def test_empty_llm_text_gives_the_documented_fallback_in_metadata(make_llm, index) -> None:
    llm = make_llm([], default="")
    strategy = SelfIRAG(as_backend(index), LlamaIndexLLM(llm), execution=NO_WAIT)
    response = SelfRAGQueryEngine(strategy=strategy).query("What is the capital of France?")
    assert str(response) == "error in generating answer"
    assert "generation_failed" in response.metadata["fallbacks"]
    errors = [e["error"] for e in response.metadata["trace"]["events"] if e.get("error")]
    assert any("empty reply" in e for e in errors)


def test_token_counts_reach_the_trace(make_llm, index) -> None:

    strategy = SelfIRAG(as_backend(index), LlamaIndexLLM(make_llm(SELF_RAG_RULES)))
    trace = SelfRAGQueryEngine(strategy=strategy).query("What is the capital of France?").metadata["trace"]
    assert trace["input_tokens"] > 50 and trace["output_tokens"] > 5


async def test_structured_predict_token_counts_reach_the_trace_per_query(make_llm, index) -> None:
    """structured_predict returns only the parsed object: the counts come from the LLM
    calls it makes, each concurrent query counting its own."""
    import asyncio

    questions = ["What is the capital of France?", "Which city is the capital of France, and why there?"]
    llms = [make_llm(SELF_RAG_RULES, pydantic_program_mode=PydanticProgramMode.LLM) for _ in questions]
    engines = [SelfRAGQueryEngine(strategy=SelfIRAG(as_backend(index), LlamaIndexLLM(llm))) for llm in llms]
    responses = await asyncio.gather(*(e.aquery(q) for e, q in zip(engines, questions, strict=True)))
    for llm, response in zip(llms, responses, strict=True):
        assert len(llm.prompts) == 1  # one structured call: answer and evaluation together
        trace = response.metadata["trace"]
        assert trace["input_tokens"] == len(llm.prompts[0].split())  # what the scripted LLM reports
        assert trace["output_tokens"] > 5
    assert responses[0].metadata["trace"]["input_tokens"] != responses[1].metadata["trace"]["input_tokens"]


def test_a_chat_models_structured_call_is_counted_once(make_llm) -> None:
    """A ``CustomLLM``'s ``chat`` wraps its ``complete``: both end with an event carrying
    the same raw reply, which must be counted once."""
    from llama_index.core.base.llms.types import LLMMetadata

    from .li_fakes import ScriptedLLM

    class ChatScripted(ScriptedLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="scripted", is_chat_model=True)

    reply = json.dumps({"relevance": 8, "accuracy": 7, "completeness": 9, "clarity": 8, "issues": [],
                        "suggestions": []})  # fmt: skip
    for cls in (ScriptedLLM, ChatScripted):
        llm = cls(rules=[("Rate", reply)], pydantic_program_mode=PydanticProgramMode.LLM)
        out = LlamaIndexLLM(llm).generate_structured("Rate this text", EVALUATION_SCHEMA)
        assert len(llm.prompts) == 1
        assert (out.input_tokens, out.output_tokens) == (len(llm.prompts[0].split()), len(reply.split()))


# ------------------------------------------------------------ LlamaIndex's public LLM calls, as they are


def test_sync_generate_uses_complete(make_llm) -> None:
    llm = make_llm([("hello", "world")])
    assert LlamaIndexLLM(llm).generate("say hello") == LLMOutput("world", input_tokens=2, output_tokens=1)
    assert llm.prompts == ["say hello"]


def test_stream_yields_the_deltas_of_stream_complete(make_llm) -> None:
    llm = make_llm([("capital", "Paris is the capital")])
    pieces = list(LlamaIndexLLM(llm).stream("the capital?"))
    assert [p.text for p in pieces] == ["Paris ", "is ", "the ", "capital "]
    assert llm.prompts == ["the capital?"]


async def test_astream_yields_the_deltas_of_astream_complete(make_llm) -> None:
    llm = make_llm([("capital", "Paris is the capital")])
    pieces = [p.text async for p in LlamaIndexLLM(llm).astream("the capital?")]
    assert pieces == ["Paris ", "is ", "the ", "capital "]


def test_the_llms_own_callback_events_spans_and_instrumentation_events_are_emitted(make_llm) -> None:
    """Every call goes through the LLM's public methods: LlamaIndex's ``LLM`` callback
    events on the LLM's own manager, its dispatcher spans and its start/end events."""
    import asyncio

    import llama_index.core.instrumentation as instrument
    from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler

    class Collect(BaseEventHandler):
        seen: list[str]

        def handle(self, event: Any, **kwargs: Any) -> None:
            self.seen.append(event.class_name())

    debug = LlamaDebugHandler(print_trace_on_end=False)
    llm = make_llm([("capital", "Paris")], callback_manager=CallbackManager([debug]))
    adapter = LlamaIndexLLM(llm)
    root, events, spans = instrument.get_dispatcher(), Collect(seen=[]), SimpleSpanHandler()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    try:
        assert adapter.generate("the capital?").text == "Paris"
        assert asyncio.run(adapter.agenerate("the capital?")).text == "Paris"
        assert "".join(p.text for p in adapter.stream("the capital?")).strip() == "Paris"
    finally:
        root.event_handlers.remove(events)
        root.span_handlers.remove(spans)
    assert [end.payload["completion"].text.strip() for _, end in debug.get_event_pairs(CBEventType.LLM)] == [
        "Paris"
    ] * 3
    assert events.seen.count("LLMCompletionStartEvent") == events.seen.count("LLMCompletionEndEvent") == 3
    names = [span.id_.rsplit("-", 5)[0] for span in spans.completed_spans]
    assert {"ScriptedLLM.complete", "ScriptedLLM.acomplete", "ScriptedLLM.stream_complete"} <= set(names)


def test_an_llms_rate_limiter_is_applied_on_every_call(make_llm) -> None:
    import asyncio

    class CountingLimiter:
        def __init__(self) -> None:
            self.acquired = 0

        async def async_acquire(self) -> None:
            self.acquired += 1

        def acquire(self) -> None:
            self.acquired += 1

    limiter = CountingLimiter()
    adapter = LlamaIndexLLM(make_llm([("capital", "Paris")], rate_limiter=limiter))
    assert asyncio.run(adapter.agenerate("the capital?")).text == "Paris"
    assert adapter.generate("the capital?").text == "Paris"
    assert limiter.acquired == 2


def test_the_options_of_the_removed_quiet_paths_are_gone(make_llm, index) -> None:
    """``instrument=`` and ``vectorized=`` chose private fast paths, removed (issue 17 §5)."""
    with pytest.raises(TypeError, match="instrument"):
        LlamaIndexLLM(make_llm(), instrument="always")  # type: ignore[call-arg]
    for option in ("instrument", "vectorized"):
        with pytest.raises(TypeError, match=option):
            as_backend(index, **{option: False})
