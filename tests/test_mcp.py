"""``selfrag mcp``: the official MCP client starts it over stdio as a subprocess and calls every
tool, reads the sources as resources and gets bad input back as tool errors; the same
tools in-process (``mcp.Client`` over the server object) for each input check; streamable
HTTP behind ``SELFRAG_API_TOKEN``, a wrong token refused. The scripted LLM (``--llm fake``)
and the hashing embedder: no model."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("bm25s")
pytest.importorskip("mcp")

from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from selfrag_core.local.factory import make_llm
from selfrag_core.mcp_server import SelfragTools, answer_of, create_server, source_uri
from selfrag_core.presets import ADAPTIVE, BASELINE, STRATEGIES, build_strategy
from selfrag_core.store import RAG

pytestmark = pytest.mark.integration

BEES = "Honeybees dance to show where flowers are. The dance points at the food."
VOLCANO = "Volcanoes erupt when gas pressure breaks the rock."


def _payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = json.loads(result.content[0].text)
    assert result.structured_content == data
    return data


def _refusal(result: Any) -> str:
    """The message of a tool error: one line, no stack trace."""
    assert result.is_error
    message: str = result.content[0].text
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    rag = RAG("hashing", path=tmp_path / "index")
    rag.index(BEES, source="notes/bees.txt")
    rag.save()
    return tmp_path / "index"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if k != "SELFRAG_API_TOKEN"},
        "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", **extra,
    }  # fmt: skip


# ----------------------------------------------------------------------------- stdio, the real client


async def test_the_official_client_calls_every_tool_over_stdio(index_dir: Path, tmp_path: Path) -> None:
    command = ["-m", "selfrag_core", "mcp", "--llm", "fake", "--index", str(index_dir)]
    params = StdioServerParameters(command=sys.executable, args=command, env=_env(tmp_path))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        assert {t.name for t in listed.tools} == {"ask", "search", "add_documents"}
        ask = next(t for t in listed.tools if t.name == "ask")
        choices = ask.input_schema["properties"]["strategy"]["enum"]
        assert choices == [BASELINE, *STRATEGIES, ADAPTIVE, "drafts"]

        answer = _payload(await session.call_tool("ask", {"question": "What do honeybees do?"}))
        assert answer["strategy"] == "self" and "dance" in answer["answer"]
        assert answer["sources"][0]["source"] == "notes/bees.txt"
        assert answer["citations"] and all(c["supported"] for c in answer["citations"])
        assert answer["citations"][0]["sources"] == [1]  # the first source supports it
        assert answer["cost"]["llm_calls"] >= 1 and answer["cost"]["max_llm_calls"] == 12

        found = _payload(await session.call_tool("search", {"query": "honeybees dance", "k": 2}))
        assert found["documents"][0]["source"] == "notes/bees.txt"
        assert found["documents"][0]["score_kind"] == "similarity"

        before = _payload(await session.call_tool("search", {"query": "volcano gas pressure", "k": 1}))
        assert before["documents"][0]["source"] != "volcano.txt"
        added = _payload(
            await session.call_tool(
                "add_documents", {"documents": [{"text": VOLCANO, "source": "volcano.txt"}]}
            )
        )
        assert added["indexed"] == 1 and added["sources"] == ["volcano.txt"] and added["persisted"]
        after = _payload(await session.call_tool("search", {"query": "volcano gas pressure", "k": 1}))
        assert after["documents"][0]["source"] == "volcano.txt"

        resources = await session.list_resources()
        uris = [str(r.uri) for r in resources.resources]
        assert uris == [source_uri("notes/bees.txt"), source_uri("volcano.txt")]
        assert uris[0] == "selfrag://source/notes%2Fbees.txt"
        read = await session.read_resource(uris[0])
        assert read.contents[0].text == BEES

        refused = await session.call_tool("search", {"query": "bees", "k": 0})
        assert _refusal(refused) == "k must be a whole number between 1 and 50, got 0"
        refused = await session.call_tool("ask", {"question": "bees?", "strategy": "magic"})
        assert _refusal(refused).startswith("unknown strategy 'magic'; choose one of plain, self")
    # what was added is in the index directory, for every other reader
    assert "volcano.txt" in RAG.load(index_dir).sources()


def test_a_missing_index_is_an_error_before_serving(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "selfrag_core", "mcp", "--llm", "fake", "--backend", "nosuch.module:make"],
        capture_output=True, text=True, env=_env(tmp_path), timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""  # nothing on the protocol channel
    assert out.stderr.startswith("selfrag: error: cannot load the backend 'nosuch.module:make'")


# ----------------------------------------------------------------------------- the tools in-process


@pytest.fixture
def server() -> Any:
    rag = RAG("hashing")
    rag.index(BEES, source="notes/bees.txt")
    llm = make_llm("fake")
    strategies = {name: build_strategy(name, rag, llm) for name in (BASELINE, "self", "hyde")}
    return create_server(SelfragTools(rag, strategies))


async def _call(server: Any, tool: str, arguments: dict[str, Any]) -> Any:
    async with Client(server, cache=None) as client:
        return await client.call_tool(tool, arguments)


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("ask", {}, "question is missing; pass it as a non-empty string"),
        ("ask", {"question": "   "}, "question is empty; pass the question as a non-empty string"),
        ("ask", {"question": 3}, "question must be a str, got int"),
        ("ask", {"question": "x" * 4001}, "question is 4,001 characters; the limit is 4,000."),
        (
            "ask",
            {"question": "bees?", "max_llm_calls": 0},
            "max_llm_calls must be a whole number >= 1, got 0",
        ),
        (
            "ask",
            {"question": "bees?", "top_k": 3},
            "ask has no argument 'top_k'; it takes question, strategy",
        ),
        ("search", {"query": "bees", "k": "5"}, "k must be a whole number between 1 and 50, got '5'"),
        ("search", {"query": "bees", "k": True}, "k must be a whole number between 1 and 50, got True"),
        ("search", {"query": "bees", "k": 51}, "k must be a whole number between 1 and 50, got 51"),
        ("add_documents", {"documents": []}, "documents must be a non-empty list"),
        ("add_documents", {"documents": ["text"]}, "documents[0] must be an object with a 'text' string"),
        ("add_documents", {"documents": [{"text": "a", "source": ""}]}, "documents[0] must have a 'text'"),
        ("add_documents", {"documents": [{"text": " "}]}, "the document is empty; send its text in 'text'"),
        ("add_documents", {"documents": [{"text": "a\x00b"}]}, "the document looks binary"),
        ("add_documents", {"documents": [{"text": "a", "metadata": {"k": [1]}}]}, "documents[0].metadata"),
        ("nope", {}, "unknown tool 'nope'; the tools are ask, search, add_documents"),
    ],
)
async def test_bad_input_is_a_tool_error_with_the_library_message(
    server: Any, tool: str, arguments: dict[str, Any], message: str
) -> None:
    assert _refusal(await _call(server, tool, arguments)).startswith(message)


async def test_ask_lowers_the_budget_and_reports_what_was_absorbed(server: Any) -> None:
    asked = {"question": "What do bees do?", "strategy": "hyde"}
    answer = _payload(await _call(server, "ask", {**asked, "max_llm_calls": 1}))
    assert answer["cost"] == {**answer["cost"], "max_llm_calls": 1, "llm_calls": 1}
    # HyDE's answer call was refused by the budget: said in the reply, not hidden
    assert answer["errors"][0].startswith("llm answer: BudgetExceededError: LLM-call budget of 1")
    wider = _payload(await _call(server, "ask", {**asked, "max_llm_calls": 99}))
    assert wider["cost"]["max_llm_calls"] == 12 and wider["errors"] == []  # only lowered, never raised
    assert "dance" in wider["answer"]


async def test_a_crash_is_a_tool_error_without_its_details() -> None:
    class Broken:
        execution = build_strategy(BASELINE, RAG("hashing"), make_llm("fake")).execution

        def plan(self, query: str, context: Any = None) -> Any:
            raise RuntimeError("secret internals")

    rag = RAG("hashing")
    broken = create_server(SelfragTools(rag, {"broken": Broken()}))
    message = _refusal(await _call(broken, "ask", {"question": "q?", "strategy": "broken"}))
    assert message == "internal error; the server log has the details"


def test_an_answer_that_is_not_a_result_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="the strategy 'mine' answered with a dict, not a selfrag Result"):
        answer_of({"answer": "x"}, "mine", None)


async def test_reading_an_unknown_source_is_a_protocol_error(server: Any) -> None:
    async with Client(server, cache=None) as client:
        with pytest.raises(MCPError, match="no indexed source 'nope'"):
            await client.read_resource(source_uri("nope"))
        with pytest.raises(MCPError, match="unknown resource 'file:///etc/passwd'"):
            await client.read_resource("file:///etc/passwd")


# ----------------------------------------------------------------------------- streamable HTTP


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(index_dir: Path, tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    log = (tmp_path / "mcp.log").open("wb")
    command = ["-m", "selfrag_core", "mcp", "--http", "--port", str(port), "--llm", "fake"]
    process = subprocess.Popen(
        [sys.executable, *command, "--index", str(index_dir)],
        env=_env(tmp_path, SELFRAG_API_TOKEN="s3cret"), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "mcp.log").read_text()
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


async def _search_over_http(url: str, token: str) -> dict[str, Any]:
    """The official client's streamable HTTP transport, with ``token``: a search."""
    import httpx2

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return _payload(await session.call_tool("search", {"query": "honeybees", "k": 1}))


def _post(url: str, token: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=10) as response:
            return response.status, {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_streamable_http_needs_the_token_as_selfrag_serve(http_server: str) -> None:
    for token, said in ((None, "missing bearer token"), ("wrong", "invalid bearer token")):
        status, body = _post(http_server, token)
        assert status == 401 and body["error"]["message"].startswith(said)
    with pytest.raises(Exception):  # noqa: B017  (the SDK's transport error for a 401)
        await _search_over_http(http_server, "wrong")
    found = await _search_over_http(http_server, "s3cret")
    assert found["documents"][0]["source"] == "notes/bees.txt"
