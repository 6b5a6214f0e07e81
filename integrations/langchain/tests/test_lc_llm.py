"""LangChainLLM: text, content blocks, usage, structured output, empty messages."""

from __future__ import annotations

import pytest
from langchain_core.callbacks import get_usage_metadata_callback
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.messages import AIMessage
from lc_fakes import ANSWER, CORPUS, keyed_model

from selfrag_core import ExecutionConfig, LLMCallError, SelfIRAG, SelfRAGConfig
from selfrag_core.prompts import EVALUATION_SCHEMA
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER
from selfrag_core.testing import FakeRetriever, judge_json
from selfrag_langchain import LangChainLLM, as_llm

INSTANT = ExecutionConfig(retry_initial_wait=0, retry_max_wait=0)


def fake_chat(*messages: AIMessage | str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(messages))


def test_content_blocks_are_joined_as_text_and_usage_is_reported() -> None:
    message = AIMessage(
        content=[
            {"type": "reasoning", "reasoning": "think first"},
            {"type": "text", "text": "Paris is "},
            {"type": "text", "text": "the capital."},
        ],
        usage_metadata={"input_tokens": 11, "output_tokens": 4, "total_tokens": 15},
    )
    out = LangChainLLM(fake_chat(message)).generate("q")
    assert (out.text, out.input_tokens, out.output_tokens) == ("Paris is the capital.", 11, 4)


async def test_async_generate_uses_ainvoke() -> None:
    out = await LangChainLLM(fake_chat(AIMessage("async reply"))).agenerate("q")
    assert out.text == "async reply"
    assert out.input_tokens is None  # the model reported no usage


def test_string_llm_works() -> None:
    assert LangChainLLM(FakeListLLM(responses=["plain text"])).generate("q").text == "plain text"


def test_empty_message_is_a_clear_failed_attempt() -> None:
    llm = LangChainLLM(
        fake_chat(AIMessage(content="", tool_calls=[{"name": "search", "args": {}, "id": "1"}]))
    )
    with pytest.raises(LLMCallError, match=r"empty message \(it asked for tool calls \['search'\]\)"):
        llm.generate("q")


def test_empty_message_is_retried_by_the_strategy() -> None:
    llm = LangChainLLM(fake_chat(AIMessage(""), AIMessage(judge_json(ANSWER))))
    result = SelfIRAG(FakeRetriever(CORPUS), llm, execution=INSTANT).query("What is the capital of France?")
    assert result.answer == ANSWER
    first = result.trace.events[1]
    assert (first.kind, first.attempts) == ("llm", 2)


def test_only_empty_messages_give_the_documented_fallback_with_the_error_in_the_trace() -> None:
    llm = LangChainLLM(fake_chat(*[AIMessage("   ")] * 6))
    config = SelfRAGConfig(llm_retries=1)
    result = SelfIRAG(FakeRetriever(CORPUS), llm, config, execution=INSTANT).query("capital of France?")
    assert result.answer == GENERATION_FAILED_ANSWER
    assert "returned an empty message" in (result.trace.errors[0].error or "")
    assert [f.name for f in result.trace.fallbacks] == ["generation_failed"]


def test_structured_output_uses_json_schema_and_keeps_usage() -> None:
    model = keyed_model(structured=True)
    out = LangChainLLM(model).generate_structured("evaluate this", EVALUATION_SCHEMA)
    assert model.methods == ["json_schema"]
    assert '"relevance": 9' in out.text
    assert out.input_tokens == 2


def test_json_mode_is_tried_when_json_schema_is_refused() -> None:
    class JsonModeOnly(type(keyed_model())):  # type: ignore[misc]
        def with_structured_output(self, schema, *, method="", **kwargs):  # type: ignore[no-untyped-def]
            if method == "json_schema":
                raise ValueError("json_schema is not supported")
            return super().with_structured_output(schema, method=method, **kwargs)

    model = JsonModeOnly(structured=True, prompts=[], methods=[])
    LangChainLLM(model).generate_structured("evaluate", EVALUATION_SCHEMA)
    assert model.methods == ["json_mode"]


def test_models_without_structured_output_fall_back_to_text() -> None:
    llm = LangChainLLM(fake_chat(AIMessage('{"relevance": 8}')))
    assert llm.structured_runnable(EVALUATION_SCHEMA) is None
    assert llm.generate_structured("evaluate", EVALUATION_SCHEMA).text == '{"relevance": 8}'
    off = LangChainLLM(keyed_model(structured=True), structured="off")
    assert off.structured_runnable(EVALUATION_SCHEMA) is None


def test_tokens_reach_the_trace_and_match_langchains_usage_callback() -> None:
    model = keyed_model(structured=True)
    strategy = SelfIRAG(FakeRetriever(CORPUS), LangChainLLM(model))
    with get_usage_metadata_callback() as usage:
        result = strategy.query("What is the capital of France?")
    reported = next(iter(usage.usage_metadata.values()))
    assert result.trace.input_tokens == reported["input_tokens"] > 0
    assert result.trace.output_tokens == reported["output_tokens"] > 0


def test_bad_arguments_are_rejected_early() -> None:
    with pytest.raises(TypeError, match="LangChain chat model"):
        LangChainLLM(object())
    with pytest.raises(ValueError, match="structured must be one of"):
        LangChainLLM(keyed_model(), structured="xml")  # type: ignore[arg-type]
    plain = object()
    assert as_llm(plain) is plain
    assert isinstance(as_llm(keyed_model()), LangChainLLM)


def test_a_raw_chat_model_works_through_the_core_without_deprecation_warnings() -> None:
    import warnings

    model = keyed_model(default=judge_json(ANSWER))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # langchain-core 1.x warns on message.text()
        result = SelfIRAG(FakeRetriever(CORPUS), model).query("What is the capital of France?")
    assert result.answer == ANSWER
    assert result.trace.input_tokens > 0


@pytest.mark.parametrize("use_async", [False, True])
def test_auto_tries_json_mode_when_the_server_refuses_json_schema_at_call_time(use_async: bool) -> None:
    """Some servers accept the json_schema binding and refuse the request (a 400 for
    ``response_format``): "auto" goes on to json_mode; an explicit mode raises."""
    import asyncio

    from langchain_core.runnables import RunnableLambda

    class RefusesJsonSchema(type(keyed_model())):  # type: ignore[misc]
        def with_structured_output(self, schema, *, method="", **kwargs):  # type: ignore[no-untyped-def]
            bound = super().with_structured_output(schema, method=method, **kwargs)
            if method != "json_schema":
                return bound

            def refuse(prompt: object) -> object:
                raise ValueError("400: response_format json_schema is not supported by this server")

            return RunnableLambda(refuse, afunc=None)

    model = RefusesJsonSchema(structured=True, prompts=[], methods=[])
    llm = LangChainLLM(model)
    call = llm.agenerate_structured if use_async else llm.generate_structured
    out = (
        asyncio.run(call("evaluate this", EVALUATION_SCHEMA))
        if use_async
        else call("evaluate this", EVALUATION_SCHEMA)
    )
    assert model.methods == ["json_schema", "json_mode"] and '"relevance": 9' in out.text
    with pytest.raises(ValueError, match="not supported by this server"):
        LangChainLLM(model, structured="json_schema").generate_structured("evaluate this", EVALUATION_SCHEMA)


def test_a_method_the_server_refuses_by_status_is_not_tried_again_and_is_in_the_trace() -> None:
    """llama.cpp's server answers json_schema with HTTP 500 on every JSON step: the
    refusal is remembered (the next steps go straight to json_mode) and the query that
    met it has it in its trace, not only in the log."""
    from langchain_core.runnables import RunnableLambda

    from selfrag_core import ExecutionConfig, SelfRAGConfig

    class ServerError(Exception):
        status_code = 500

    class RefusesJsonSchema(type(keyed_model())):  # type: ignore[misc]
        def with_structured_output(self, schema, *, method="", **kwargs):  # type: ignore[no-untyped-def]
            bound = super().with_structured_output(schema, method=method, **kwargs)
            if method != "json_schema":
                return bound

            def refuse(prompt: object) -> object:
                self.methods.append("json_schema refused")
                raise ServerError("500: json_schema failed")

            return RunnableLambda(refuse, afunc=None)

    model = RefusesJsonSchema(structured=True, prompts=[], methods=[], default=judge_json(ANSWER, 9))
    strategy = SelfIRAG(
        FakeRetriever(CORPUS), LangChainLLM(model), SelfRAGConfig(), execution=ExecutionConfig()
    )
    first = strategy.query("What is the capital of France?")
    second = strategy.query("What is the capital of France?")
    assert first.answer == ANSWER == second.answer
    assert model.methods.count("json_schema refused") == 1  # tried once, then remembered
    [fallback] = first.trace.fallbacks
    assert fallback.name == "structured_output_refused" and "not tried again" in (fallback.error or "")
    assert second.trace.fallbacks == []
