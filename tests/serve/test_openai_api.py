"""The OpenAI-compatible surface (/v1/models, /v1/chat/completions) with the official
``openai`` client against a real server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from serve_helpers import ANSWER, TOKEN, Echo, ScriptedLLM, Server, StreamingLLM, make_rag, serving

from selfrag_core import Answer, PlainRAG, SelfHealingRAG
from selfrag_core.engine import Generate, Plan, Retrieve
from selfrag_core.protocols import LLMOutput
from selfrag_core.serve import default_strategies
from selfrag_core.serve.openai_api import ChatCompletionRequest, ChatReply
from selfrag_core.strategies.base import format_context

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"
OTHER = "Berlin is the capital of Germany and its largest city."


class CountingLLM(ScriptedLLM):
    """Reports its token counts, as a real model does."""

    async def agenerate(self, prompt: str) -> Any:
        text = await super().agenerate(prompt)
        return LLMOutput(text, input_tokens=len(prompt.split()), output_tokens=len(text.split()))


class Swap(Echo):
    """Streams ``ANSWER``, then answers something else (its stream is reset)."""

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        docs = yield Retrieve(self.rag_system, query, 3)
        yield Generate(self.llm, f"{format_context(docs)}\n\n{query}", "answer", stream=True)
        return Answer(OTHER, docs)


@pytest.fixture(scope="module")
def healing_llm() -> ScriptedLLM:
    return ScriptedLLM()


@pytest.fixture(scope="module")
def server(healing_llm: ScriptedLLM) -> Iterator[Server]:
    rag, llm = make_rag(), ScriptedLLM()
    strategies = {
        **default_strategies(rag, llm),
        "plain": PlainRAG(rag, CountingLLM()),
        "healing": SelfHealingRAG(healing_llm, [rag]),
        "stream": Echo(rag, StreamingLLM(latency=0.05)),
        "swap": Swap(rag, StreamingLLM(latency=0.05)),
    }
    with serving(rag, llm, strategies, api_token=TOKEN, metrics=True, max_body_bytes=20_000) as s:
        yield s


@pytest.fixture
def client(server: Server) -> Iterator[Any]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0) as c:
        yield c


def _ask(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": QUESTION}], **extra}


def _joined(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_models_lists_one_model_per_strategy(client: Any, server: Server) -> None:
    models = client.models.list()
    assert [m.id for m in models] == [f"selfrag-{name}" for name in server.state.strategies]
    assert {m.owned_by for m in models} == {"selfrag"}
    assert client.models.retrieve("selfrag-hyde").id == "selfrag-hyde"
    assert client.models.retrieve("hyde").id == "selfrag-hyde"  # the bare strategy name too


def test_a_completion_is_the_strategy_answer_with_usage_and_sources(client: Any, server: Server) -> None:
    reply = client.chat.completions.create(model="selfrag-plain", temperature=0.2, max_tokens=50, **_ask())
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        expected = http.post("/query/plain", json={"question": QUESTION}).json()
    assert reply.object == "chat.completion" and reply.model == "selfrag-plain"
    assert reply.id.startswith("chatcmpl-") and reply.created > 0
    (choice,) = reply.choices
    assert choice.message.role == "assistant" and choice.finish_reason == "stop"
    assert choice.message.content == expected["answer"] == ANSWER
    trace = reply.model_extra["selfrag"]["trace"]
    assert trace["input_tokens"] > 0 and trace["output_tokens"] == len(ANSWER.split())
    assert reply.usage.prompt_tokens == trace["input_tokens"]
    assert reply.usage.completion_tokens == trace["output_tokens"]
    assert reply.usage.total_tokens == trace["input_tokens"] + trace["output_tokens"]
    extension = reply.model_extra["selfrag"]
    assert "answer" not in extension
    assert extension["sources"] == expected["sources"] and extension["citations"] == expected["citations"]
    assert extension["request"] == {
        "strategy": "plain",
        "conversation_turns": 0,
        "conversation": "none",
        "ignored": ["max_tokens", "temperature"],
    }


@pytest.mark.parametrize("live", [False, True], ids=["final", "live_tokens"])
def test_a_streamed_completion_joins_to_the_answer(client: Any, live: bool) -> None:
    stream = client.chat.completions.create(
        model="selfrag-stream",
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"selfrag": {"live_tokens": live}},
        **_ask(),
    )
    chunks = list(stream)
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert _joined(chunks) == ANSWER
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    # live: the tokens as the LLM streamed them; else the final answer in one delta
    assert len(content) == (len(ANSWER.split()) if live else 1)
    last, usage = chunks[-2], chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra["selfrag"]["sources"]
    assert usage.choices == [] and usage.usage is not None


def test_a_stream_ends_with_done(server: Server) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = {"model": "selfrag-hyde", "stream": True, **_ask()}
    with (
        server.client() as http,
        http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and "usage" not in chunks[-1]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == ANSWER


def test_a_reset_stream(client: Any) -> None:
    """The text a strategy streamed and then replaced never reaches the content by
    default; with live_tokens a chunk says it is void, and the answer follows."""
    final = list(client.chat.completions.create(model="selfrag-swap", stream=True, **_ask()))
    assert _joined(final) == OTHER
    live = list(
        client.chat.completions.create(
            model="selfrag-swap", stream=True, extra_body={"selfrag": {"live_tokens": True}}, **_ask()
        )
    )
    resets = [i for i, c in enumerate(live) if (c.model_extra.get("selfrag") or {}).get("event") == "reset"]
    assert len(resets) == 1
    assert _joined(live[: resets[0]]) == ANSWER and _joined(live[resets[0] :]) == OTHER


@pytest.mark.parametrize("token", ["wrong", None], ids=["wrong", "missing"])
def test_a_wrong_token_is_refused_as_openai_clients_expect(server: Server, token: str | None) -> None:
    headers = {} if token else {"Authorization": ""}  # the client sends no empty bearer itself
    with openai.OpenAI(
        base_url=f"{server.url}/v1", api_key=token or "unused", max_retries=0, default_headers=headers
    ) as bad:
        for call in (bad.models.list, lambda: bad.chat.completions.create(model="selfrag-plain", **_ask())):
            with pytest.raises(openai.AuthenticationError) as caught:
                call()
            assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"
            assert set(caught.value.body) == {"message", "type", "param", "code"}
            assert "Bearer" in caught.value.message


def test_an_unknown_model_is_404_in_openai_shape(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-4o", **_ask())
    assert caught.value.code == "model_not_found" and caught.value.type == "invalid_request_error"
    assert "selfrag-hyde" in caught.value.message  # it names the models there are
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


@pytest.mark.parametrize(
    ("messages", "extra", "param", "says"),
    [
        ([{"role": "assistant", "content": "Hi"}], {}, None, "end with the user's question"),
        ([{"role": "user", "content": QUESTION}], {"n": 2}, "n", "send n=1"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            {},
            "messages.0.content",
            "text parts only",
        ),
        ([{"role": "user", "content": QUESTION}], {"selfrag": {"top_k": "3"}}, "selfrag.top_k", "integer"),
    ],
    ids=["last-not-user", "n", "image", "option"],
)
def test_an_invalid_request_says_what_to_send(
    client: Any, messages: list[Any], extra: dict[str, Any], param: str | None, says: str
) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(model="selfrag-plain", messages=messages, extra_body=extra)
    assert caught.value.code == "validation_error" and says in caught.value.message
    assert caught.value.param == param


def test_an_unknown_option_is_refused_naming_the_options(client: Any) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(model="selfrag-self", extra_body={"selfrag": {"depth": 1}}, **_ask())
    assert "selfrag.depth is not an option; the options are confidence_threshold, max_depth" in str(
        caught.value.message
    )
    assert "threshold," not in caught.value.message.replace("confidence_threshold,", "")  # no old names


def test_a_too_long_question_and_a_too_large_body(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:  # the server's max_question_chars
        client.chat.completions.create(
            model="selfrag-plain", messages=[{"role": "user", "content": "x " * 3000}]
        )
    assert caught.value.code == "bad_request"
    big = [{"role": "user", "content": "x" * 25_000}]
    with pytest.raises(openai.APIStatusError) as too_large:
        client.chat.completions.create(model="selfrag-plain", messages=big)
    assert too_large.value.status_code == 413 and too_large.value.code == "payload_too_large"


def test_the_conversation_is_memory_where_the_strategy_takes_one(
    client: Any, healing_llm: ScriptedLLM
) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Which river flows through Paris?"},
        {"role": "assistant", "content": "The Seine."},
        {"role": "user", "content": QUESTION},
    ]
    healing_llm.reset()
    reply = client.chat.completions.create(model="selfrag-healing", messages=messages)
    assert reply.choices[0].message.content == ANSWER
    request = reply.model_extra["selfrag"]["request"]
    assert request["conversation"] == "used" and request["conversation_turns"] == 1
    assert request["ignored"] == ["messages[role=system]"]
    assert any("Which river flows through Paris?\nA: The Seine." in p for p in healing_llm.prompts)
    other = client.chat.completions.create(model="selfrag-plain", messages=messages)
    assert other.model_extra["selfrag"]["request"]["conversation"] == "ignored"


def test_a_refusal_keeps_its_status_and_retry_after(client: Any, server: Server) -> None:
    server.state.shutting_down = True
    try:
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="selfrag-plain", **_ask())
    finally:
        server.state.shutting_down = False
    assert caught.value.status_code == 503 and caught.value.code == "overloaded"
    assert caught.value.type == "server_error"
    assert caught.value.response.headers["Retry-After"] == str(server.state.settings.retry_after_s)


@pytest.mark.parametrize("threshold", ["confidence_threshold", "threshold"])  # (its old name, deprecated)
def test_a_query_over_its_budget_is_an_error_in_both_modes(client: Any, threshold: str) -> None:
    options = {"selfrag": {"max_llm_calls": 1, threshold: 1.0}}  # SelfIRAG wants a refinement call
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="selfrag-self", extra_body=options, **_ask())
    assert caught.value.status_code == 504 and caught.value.code == "budget_exceeded"
    body = caught.value.response.json()  # the partial trace and the fallback result, as /query gives
    assert body["result"]["answer"] == ANSWER and body["trace"]["llm_calls"] >= 1
    stream = client.chat.completions.create(model="selfrag-self", stream=True, extra_body=options, **_ask())
    with pytest.raises(openai.APIError) as mid_stream:  # the headers were sent: the error is a chunk
        list(stream)
    assert "budget of 1 LLM calls" in mid_stream.value.message
    assert mid_stream.value.code == "budget_exceeded"


def test_completions_count_in_the_metrics_and_stats(client: Any, server: Server) -> None:
    served = server.state.counters["served"]
    client.chat.completions.create(model="selfrag-hyde", **_ask())
    assert server.state.counters["served"] == served + 1
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        metrics = http.get("/metrics").text
    assert 'selfrag_requests_total{status="200",strategy="hyde"}' in metrics


def test_a_step_event_is_an_extension_chunk_with_an_empty_delta() -> None:
    body = ChatCompletionRequest.model_validate({"model": "selfrag-hyde", **_ask()})
    reply = ChatReply(body, "hyde", None, live=False)
    (text,) = reply.events("step", {"kind": "retrieval", "documents": 3})
    chunk = json.loads(text.removeprefix("data: "))
    assert chunk["choices"][0]["delta"] == {} and chunk["choices"][0]["finish_reason"] is None
    assert chunk["selfrag"] == {"event": "step", "data": {"kind": "retrieval", "documents": 3}}
    assert list(reply.events("trace", {"kind": "llm"})) == []  # the trace comes whole at the end
    assert text.endswith("\n\n")
