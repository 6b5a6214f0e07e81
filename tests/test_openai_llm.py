"""OpenAICompatibleLLM against a fake OpenAI-compatible HTTP server (stdlib, in a thread),
through the real ``openai`` client: usage, streaming, the structured-output probe, errors."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("openai", reason="the [openai] extra is not installed (pip install 'selfrag[openai]')")

from selfrag_core import ConfigurationError, ExecutionConfig, LLMOutput, PlainRAG, SelfIRAG
from selfrag_core.llm import RETRY_AFTER_MAX_S, call_llm_detailed
from selfrag_core.local.factory import make_llm
from selfrag_core.openai_llm import OpenAICompatibleLLM
from selfrag_core.replay import CachedLLM
from selfrag_core.testing import FakeRetriever, judge_json

ANSWER = "Paris is the capital of France."
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "relevance": {"type": "integer"}},
    "required": ["answer", "relevance"],
}
DOCS = ["Paris is the capital of France. The city lies on the river Seine.", "Berlin is in Germany."]
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def method_of(body: dict[str, Any]) -> str:
    """Which structured-output method a request uses."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return "json_schema"
    if body.get("tools"):
        return "tools"
    if fmt.get("type") == "json_object":
        return "json_object_schema" if "schema" in fmt else "json_object"
    return "text"


@dataclass
class FakeServer:
    """What the fake server does: ``refuse`` maps a method to the HTTP status it gets;
    ``statuses`` are the statuses of the next requests (then normal replies);
    ``requests`` logs every request body."""

    url: str = ""
    refuse: dict[str, int] = field(default_factory=dict)
    statuses: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    reject_stream_options: bool = False
    empty: set[str] = field(default_factory=set)  # methods answered without content
    error_headers: dict[str, str] = field(default_factory=dict)  # sent with every error reply
    lock: threading.Lock = field(default_factory=threading.Lock)

    def methods(self) -> list[str]:
        return [method_of(body) for body in self.requests]

    def reply(self, body: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            self.requests.append(body)
            if self.statuses:
                return self.statuses.pop(0), None
        method = method_of(body)
        if method in self.refuse:
            return self.refuse[method], None
        if body.get("stream") and self.reject_stream_options and "stream_options" in body:
            return 400, None
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
        if method in self.empty:
            message["content"] = ""
        elif method == "tools":
            call = {"name": "reply", "arguments": judge_json(ANSWER, 9)}
            message = {"role": "assistant", "content": None,
                       "tool_calls": [{"id": "call_1", "type": "function", "function": call}]}  # fmt: skip
        elif method != "text" or "JSON" in json.dumps(body["messages"]):
            message["content"] = judge_json(ANSWER, 9)
        return 200, {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": USAGE,
        }  # fmt: skip


def make_handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.headers.get("Authorization") == "Bearer bad-key":
                return self.send_json(401, {"error": {"message": "Incorrect API key", "type": "auth"}})
            if self.path != "/v1/chat/completions":
                return self.send_json(404, {"error": {"message": "no such endpoint"}})
            status, payload = server.reply(body)
            if status != 200:
                return self.send_json(
                    status,
                    {"error": {"message": f"refused with {status}", "code": status}},
                    server.error_headers,
                )
            if body.get("stream"):
                return self.send_stream(body)
            return self.send_json(200, payload)

        def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def send_stream(self, body: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            base = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
            }
            for word in ["Paris ", "is ", "the ", "capital."]:
                delta = {"index": 0, "delta": {"content": word}, "finish_reason": None}
                self.event({**base, "choices": [delta]})
            self.event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                self.event({**base, "choices": [], "usage": USAGE})
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

        def event(self, payload: Any) -> None:
            self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            self.wfile.flush()

    return Handler


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def instant() -> ExecutionConfig:
    async def no_async_sleep(_: float) -> None:
        return None

    return ExecutionConfig(sleep=lambda _: None, async_sleep=no_async_sleep)


def make(server: FakeServer, **options: Any) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM("test-model", base_url=server.url, api_key="k", **options)


# ----------------------------------------------------------------------------- plain calls


def test_generate_reports_usage_and_sends_max_tokens(server: FakeServer) -> None:
    llm = make(server, max_tokens=64, temperature=0.0, seed=3)
    out = llm.generate("Say it.")
    assert out == LLMOutput(ANSWER, 11, 7)
    body = server.requests[0]
    assert body["max_tokens"] == 64 and "max_completion_tokens" not in body
    assert body["model"] == "test-model" and body["temperature"] == 0.0 and body["seed"] == 3
    assert body["messages"] == [{"role": "user", "content": "Say it."}]


async def test_agenerate_reports_usage(server: FakeServer) -> None:
    llm = make(server, system_prompt="Be brief.")
    assert await llm.agenerate("Say it.") == LLMOutput(ANSWER, 11, 7)
    assert server.requests[0]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_stream_yields_pieces_then_usage(server: FakeServer) -> None:
    pieces = list(make(server).stream("Say it."))
    assert pieces[:-1] == ["Paris ", "is ", "the ", "capital."]
    assert pieces[-1] == LLMOutput("", 11, 7)
    assert server.requests[0]["stream_options"] == {"include_usage": True}


async def test_astream_yields_pieces_then_usage(server: FakeServer) -> None:
    pieces = [p async for p in make(server).astream("Say it.")]
    assert "".join(p for p in pieces if isinstance(p, str)) == "Paris is the capital."
    assert pieces[-1] == LLMOutput("", 11, 7)


def test_a_server_refusing_stream_options_streams_without_usage_once_told(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.reject_stream_options = True
    llm = make(server)
    with caplog.at_level(logging.WARNING, logger="selfrag"):
        assert "".join(p for p in llm.stream("a") if isinstance(p, str)) == "Paris is the capital."
    assert "stream_options" in caplog.text
    list(llm.stream("b"))
    assert ["stream_options" in body for body in server.requests] == [True, False, False]


def test_streamed_call_through_the_library_counts_tokens(server: FakeServer) -> None:
    sent: list[str] = []
    reply = call_llm_detailed(make(server), "Say it.", retries=0, sink=sent.append)
    assert "".join(sent) == reply.text == "Paris is the capital."
    assert (reply.input_tokens, reply.output_tokens) == (11, 7)


# ----------------------------------------------------------------------------- the probe


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_every_structured_fallback_sends_the_callers_limits(
    server: FakeServer, use_async: bool
) -> None:
    """The probe's every step (json_schema refused like llama.cpp does, then each method
    down to plain text) and the calls after it carry max_tokens, temperature and seed."""
    server.refuse = {m: 500 for m in ("json_schema", "tools", "json_object_schema", "json_object")}
    llm = make(server, max_tokens=80, temperature=0.2, seed=7)
    for _ in range(2):
        if use_async:
            await llm.agenerate_structured("Answer in JSON.", SCHEMA)
        else:
            llm.generate_structured("Answer in JSON.", SCHEMA)
    assert server.methods() == ["json_schema", "tools", "json_object_schema", "json_object", "text", "text"]
    assert all((r["max_tokens"], r["temperature"], r["seed"]) == (80, 0.2, 7) for r in server.requests)


def test_probe_skips_a_refused_method_once_and_remembers_the_working_one(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.refuse = {"json_schema": 500}  # llama.cpp's server
    llm = make(server)
    with caplog.at_level(logging.WARNING, logger="selfrag"):
        first = llm.generate_structured("Answer in JSON.", SCHEMA)
    assert json.loads(first.text)["answer"] == ANSWER and first.input_tokens == 11
    for _ in range(3):
        llm.generate_structured("Answer in JSON.", SCHEMA)
    assert server.methods() == ["json_schema", "tools", "tools", "tools", "tools"]
    assert llm.structured_method == "tools"
    [fallback] = llm.structured_fallbacks
    assert (fallback.method, fallback.used) == ("json_schema", "tools") and "500" in fallback.error
    assert "json_schema" in caplog.text and "using tools" in caplog.text
    tools_request = server.requests[1]
    assert tools_request["tools"][0]["function"]["parameters"] == SCHEMA
    assert tools_request["tool_choice"] == {"type": "function", "function": {"name": "reply"}}
    assert server.requests[0]["response_format"]["json_schema"]["schema"] == SCHEMA


def test_a_refused_method_is_a_fallback_in_the_query_trace(server: FakeServer) -> None:
    """The probe's refusals reach the trace of the query that probed (once: later calls
    use the remembered method), not only the log."""
    from selfrag_core.engine import Generate, Run, run_sync

    server.refuse = {"json_schema": 500}
    llm = make(server)

    def plan() -> Any:
        yield Generate(llm, "Answer in JSON.", "evaluate", 0, SCHEMA)
        return (yield Generate(llm, "Again, in JSON.", "evaluate", 0, SCHEMA))

    run = Run(ExecutionConfig())
    assert json.loads(run_sync(plan(), run).text)["answer"] == ANSWER
    [fallback] = run.trace.fallbacks
    assert fallback.name == "structured_output_refused" and fallback.detail == {"purpose": "evaluate"}
    assert "json_schema" in (fallback.error or "") and "using tools" in (fallback.error or "")
    later = Run(ExecutionConfig())
    run_sync(plan(), later)
    assert later.trace.fallbacks == [] and later.trace.llm_calls == 2


async def test_async_probe_falls_back_to_json_mode_with_schema(server: FakeServer) -> None:
    server.refuse = {"json_schema": 500, "tools": 400}
    llm = make(server)
    out = await llm.agenerate_structured("Answer in JSON.", SCHEMA)
    assert json.loads(out.text)["relevance"] == 9 and out.output_tokens == 7
    await llm.agenerate_structured("Answer in JSON.", SCHEMA)
    assert server.methods() == ["json_schema", "tools", "json_object_schema", "json_object_schema"]
    assert [f.method for f in llm.structured_fallbacks] == ["json_schema", "tools"]
    assert server.requests[-1]["response_format"] == {"type": "json_object", "schema": SCHEMA}


async def test_concurrent_first_calls_probe_once(server: FakeServer) -> None:
    import asyncio

    server.refuse = {"json_schema": 500}
    llm = make(server)
    await asyncio.gather(*(llm.agenerate_structured("JSON please", SCHEMA) for _ in range(4)))
    assert server.methods().count("json_schema") == 1 and len(llm.structured_fallbacks) == 1


def test_every_structured_method_refused_falls_back_to_text(server: FakeServer) -> None:
    server.refuse = {"json_schema": 422, "tools": 400, "json_object_schema": 400, "json_object": 501}
    llm = make(server)
    out = llm.generate_structured("Answer in JSON.", SCHEMA)
    assert json.loads(out.text)["answer"] == ANSWER
    assert llm.structured_method == "text"
    assert [f.method for f in llm.structured_fallbacks] == ["json_schema", "tools", "json_object_schema",
                                                          "json_object"]  # fmt: skip


def test_a_transient_error_during_the_probe_settles_nothing(server: FakeServer) -> None:
    server.statuses = [503]
    llm = make(server)
    with pytest.raises(Exception, match="503"):
        llm.generate_structured("Answer in JSON.", SCHEMA)
    assert llm.structured_method is None and llm.structured_fallbacks == []
    llm.generate_structured("Answer in JSON.", SCHEMA)
    assert llm.structured_method == "json_schema"


def test_a_method_answering_without_content_is_skipped(server: FakeServer) -> None:
    server.refuse = {"json_schema": 500}
    server.empty = {"tools"}  # e.g. a server that ignores tool_choice and says nothing
    llm = make(server)
    out = llm.generate_structured("Answer in JSON.", SCHEMA)
    assert json.loads(out.text)["answer"] == ANSWER and llm.structured_method == "json_object_schema"
    assert [(f.method, f.used) for f in llm.structured_fallbacks] == [
        ("json_schema", "json_object_schema"),
        ("tools", "json_object_schema"),
    ]
    assert "without content" in llm.structured_fallbacks[1].error


def test_a_missing_openai_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from selfrag_core import MissingDependencyError

    monkeypatch.setitem(sys.modules, "openai", None)  # import openai raises ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'selfrag\[openai\]'"):
        OpenAICompatibleLLM("m", base_url="http://127.0.0.1:9/v1")


def test_structured_methods_can_be_restricted(server: FakeServer) -> None:
    llm = make(server, structured_methods=("json_object", "text"))
    llm.generate_structured("Answer in JSON.", SCHEMA)
    assert server.methods() == ["json_object"]
    with pytest.raises(ValueError, match="structured_methods"):
        make(server, structured_methods=("grammar",))


# ----------------------------------------------------------------------------- errors


def test_401_is_a_configuration_error_without_retries(server: FakeServer) -> None:
    llm = OpenAICompatibleLLM("test-model", base_url=server.url, api_key="bad-key")
    with pytest.raises(ConfigurationError, match="API key") as info:
        call_llm_detailed(llm, "Say it.", retries=3, sleep=lambda _: None)
    assert info.value.attempts == 1


def test_404_names_the_model_and_the_url(server: FakeServer) -> None:
    llm = OpenAICompatibleLLM("test-model", base_url=server.url + "/nowhere", api_key="k")
    with pytest.raises(ConfigurationError, match="base URL"):
        llm.generate("Say it.")


def test_503_is_retried_by_the_library(server: FakeServer) -> None:
    server.statuses = [503, 503]
    reply = call_llm_detailed(make(server), "Say it.", retries=2, sleep=lambda _: None)
    assert reply.text == ANSWER and reply.attempts == 3 and len(server.requests) == 3


@pytest.mark.parametrize(
    ("status", "headers", "waited"),
    [
        (429, {"Retry-After": "7"}, 7.0),
        (503, {"Retry-After": "2.5"}, 2.5),
        (429, {"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),
        (429, {"Retry-After": "3600"}, RETRY_AFTER_MAX_S),  # capped
        (429, {"Retry-After": "soon"}, 0.5),  # unreadable: the library's own back-off
        (500, {"Retry-After": "7"}, 0.5),  # only a 429 or a 503 asks to wait
    ],
)
def test_a_retry_waits_as_long_as_the_server_asks(
    server: FakeServer, status: int, headers: dict[str, str], waited: float
) -> None:
    server.statuses, server.error_headers = [status], headers
    slept: list[float] = []
    reply = call_llm_detailed(make(server), "Say it.", retries=2, sleep=slept.append, initial_wait=0.5)
    assert reply.text == ANSWER and reply.attempts == 2 and slept == [waited]


def test_retry_after_as_an_http_date(server: FakeServer) -> None:
    server.statuses, server.error_headers = [429], {"Retry-After": formatdate(time.time() + 6, usegmt=True)}
    slept: list[float] = []
    assert call_llm_detailed(make(server), "Say it.", retries=1, sleep=slept.append).text == ANSWER
    assert len(slept) == 1 and 4 < slept[0] <= 6


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_retry_after_never_waits_past_the_query_deadline(server: FakeServer, use_async: bool) -> None:
    server.statuses, server.error_headers = [429], {"Retry-After": "20"}
    slept: list[float] = []

    async def async_sleep(seconds: float) -> None:
        slept.append(seconds)

    execution = ExecutionConfig(query_timeout=5.0, sleep=slept.append, async_sleep=async_sleep)
    rag = PlainRAG(FakeRetriever(DOCS), make(server), execution=execution)
    result = (
        await rag.aquery("What is the capital of France?")
        if use_async
        else rag.query("What is the capital of France?")
    )
    assert slept == [] and len(server.requests) == 1  # no wait past the deadline, no retry
    failed = [e.error or "" for e in result.trace.events if e.kind == "llm"]
    assert any("a retry would wait 20.00s" in error for error in failed), failed


def test_the_clients_own_retries_are_off(server: FakeServer) -> None:
    server.statuses = [500]
    with pytest.raises(Exception, match="500"):
        make(server).generate("Say it.")
    assert len(server.requests) == 1


def test_no_key_and_no_base_url_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAICompatibleLLM("gpt-4o-mini")


def test_environment_gives_base_url_and_key(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm = OpenAICompatibleLLM("test-model")  # a local server: a placeholder key
    assert llm.base_url == server.url and llm.generate("Say it.").text == ANSWER


def test_bad_settings_are_rejected_early() -> None:
    with pytest.raises(ConfigurationError):
        OpenAICompatibleLLM(" ", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="max_tokens"):
        OpenAICompatibleLLM("m", base_url="http://127.0.0.1:9/v1", max_tokens=0)


# ----------------------------------------------------------------------------- the library


def test_plain_rag_trace_has_the_usage(server: FakeServer, instant: ExecutionConfig) -> None:
    result = PlainRAG(FakeRetriever(list(DOCS)), make(server), execution=instant).query("Capital of France?")
    assert result.answer == ANSWER
    assert result.trace.input_tokens == 11 and result.trace.output_tokens == 7


async def test_self_rag_json_step_through_the_probe(server: FakeServer, instant: ExecutionConfig) -> None:
    server.refuse = {"json_schema": 500}
    llm = make(server)
    rag = SelfIRAG(FakeRetriever(list(DOCS)), llm, execution=instant)
    first = await rag.aquery("What is the capital of France?")
    second = rag.query("What is the capital of France?")
    for result in (first, second):
        assert result.answer == ANSWER and result.confidence == pytest.approx(0.9)
        assert result.trace.input_tokens >= 11 and result.trace.output_tokens >= 7
    assert server.methods().count("json_schema") == 1 and llm.structured_method == "tools"


def test_plain_rag_streams_through_the_server(server: FakeServer, instant: ExecutionConfig) -> None:
    rag = PlainRAG(FakeRetriever(list(DOCS)), make(server), execution=instant)
    events = list(rag.stream("Capital of France?"))
    tokens = [e for e in events if getattr(e, "kind", "") == "token"]
    assert tokens and events[-1].result is not None
    assert events[-1].result.trace.input_tokens == 11


def test_cache_identity_and_cached_replays(server: FakeServer, tmp_path: Any) -> None:
    llm = make(server, max_tokens=32)
    identity = llm.cache_identity
    assert identity["model"] == f"openai:test-model@{server.url.split('/')[2]}"
    assert identity["max_tokens"] == 32 and identity["temperature"] == 0.0
    cached = CachedLLM(llm, tmp_path / "cache.sqlite")
    assert call_llm_detailed(cached, "Say it.").text == call_llm_detailed(cached, "Say it.").text
    assert len(server.requests) == 1


# ----------------------------------------------------------------------------- the factory


def test_factory_openai_spec(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SELFRAG_LLM_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    llm = make_llm("openai:test-model", n_threads=2)  # a local model's option is dropped
    assert isinstance(llm, OpenAICompatibleLLM) and llm.base_url == server.url
    assert llm.generate("Say it.").text == ANSWER
    explicit = make_llm("openai:other", base_url="http://example.invalid/v1", api_key="k")
    assert explicit.model == "other" and explicit.base_url == "http://example.invalid/v1"
    with pytest.raises(ConfigurationError, match="model name"):
        make_llm("openai:")


def test_factory_openai_spec_without_a_server_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from selfrag_core.local import factory

    for name in ("SELFRAG_LLM_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(factory, "provider_entry_points", list)  # no LangChain adapter
    with pytest.raises(ConfigurationError, match="SELFRAG_LLM_BASE_URL"):
        make_llm("openai:gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "k")  # OpenAI's own API
    llm = make_llm("openai:gpt-4o-mini")
    assert isinstance(llm, OpenAICompatibleLLM) and llm.base_url is None
    assert llm.cache_identity["model"] == "openai:gpt-4o-mini@api.openai.com"


def test_the_command_line_takes_a_base_url_only_for_openai() -> None:
    from selfrag_core.cli.commands import _llm
    from selfrag_core.cli.files import CLIError
    from selfrag_core.cli.parser import build_parser

    args = build_parser().parse_args(
        ["ask", "q", "--llm", "local", "--llm-base-url", "http://localhost:1/v1"]
    )
    with pytest.raises(CLIError, match="--llm-base-url is for --llm openai:MODEL"):
        _llm(args)
    args = build_parser().parse_args(
        ["ask", "q", "--llm", "openai:m", "--llm-base-url", "http://localhost:1/v1"]
    )
    llm = _llm(args)
    assert llm.model == "m" and "localhost:1" in str(llm.cache_identity["model"])
