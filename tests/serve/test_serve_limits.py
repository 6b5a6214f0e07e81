"""Limits of a public service: bearer token, body size, concurrency bound, CORS."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
from serve_helpers import TOKEN, ScriptedLLM, Server, make_rag, serving

from selfrag_core import SelfIRAG
from selfrag_core.serve import ServeSettings

if TYPE_CHECKING:
    from starlette.types import Message, Receive, Scope, Send

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def guarded() -> Iterator[Server]:
    """Token required, 2 000-byte bodies, 2 queries at once (0.4 s each), one CORS origin."""
    rag = make_rag()
    strategies = {"self": SelfIRAG(rag, ScriptedLLM(latency=0.4))}
    with serving(
        rag,
        None,
        strategies,
        api_token=TOKEN,
        max_body_bytes=2_000,
        max_concurrent_queries=2,
        retry_after_s=3,
        cors_origins=("https://app.example",),
    ) as server:
        yield server


def test_token_is_required_except_for_healthz(guarded: Server) -> None:
    with guarded.client() as c:
        assert c.get("/healthz").status_code == 200
        for response in (
            c.get("/query/self", params={"q": QUESTION}),
            c.get("/stats"),
            c.post("/documents", json={"text": "x"}),
            c.get("/query/self", params={"q": QUESTION}, headers={"Authorization": "Bearer wrong"}),
            c.get("/stats", headers={"Authorization": TOKEN}),  # no scheme
        ):
            assert response.status_code == 401
            assert response.json()["error"]["type"] == "unauthorized"
            assert response.headers["WWW-Authenticate"] == "Bearer"
        assert c.get("/stats", headers=AUTH).status_code == 200
        assert c.get("/query/self", params={"q": QUESTION}, headers=AUTH).status_code == 200


def test_token_from_the_environment() -> None:
    assert ServeSettings.from_env({"SELFRAG_API_TOKEN": "abc"}).api_token == "abc"
    assert ServeSettings.from_env({}).api_token is None
    with pytest.raises(ValueError, match="empty"):
        ServeSettings(api_token="  ")


def test_oversized_bodies_are_413_declared_or_chunked(guarded: Server) -> None:
    big = {"question": "q" * 3_000}
    with guarded.client(headers=AUTH) as c:
        declared = c.post("/query/self", json=big)
        assert declared.status_code == 413
        assert declared.json()["error"] == {
            "type": "payload_too_large",
            "message": "request body is larger than 2,000 bytes; send less per request",
            "status": 413,
        }

        def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
            yield b'{"text": "'
            for _ in range(10):
                yield b"a" * 500
            yield b'"}'

        chunked = c.post("/documents", content=chunks(), headers={"Content-Type": "application/json"})
        assert chunked.status_code == 413
        assert c.get("/healthz").json()["status"] == "ok"


@pytest.mark.parametrize("declared", [b"\xb2", b"12a", b"", b"-1", b"\xd9\xa1"])  # "\xb2" is "²"
def test_a_malformed_content_length_is_400(declared: bytes) -> None:
    from selfrag_core.serve.middleware import GuardMiddleware

    async def app(scope: Scope, receive: Receive, send: Send) -> None:  # pragma: no cover
        raise AssertionError("a refused request must not reach the app")

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:  # pragma: no cover
        return {"type": "http.disconnect"}

    guard = GuardMiddleware(app, settings=ServeSettings(max_body_bytes=2_000))
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/documents",
        "headers": [(b"content-length", declared)],
    }
    asyncio.run(guard(scope, receive, send))
    assert sent[0]["status"] == 400
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert body["error"]["type"] == "bad_request"
    assert body["error"]["message"].startswith("invalid Content-Length")


def test_beyond_the_concurrency_bound_is_503_with_retry_after(guarded: Server) -> None:
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=guarded.url, headers=AUTH, timeout=20) as c:
            return list(
                await asyncio.gather(*(c.get("/query/self", params={"q": QUESTION}) for _ in range(5)))
            )

    responses = asyncio.run(burst())
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 200, 503, 503, 503]
    rejected = [r for r in responses if r.status_code == 503]
    assert all(r.headers["Retry-After"] == "3" for r in rejected)
    assert rejected[0].json()["error"]["type"] == "overloaded"
    with guarded.client(headers=AUTH) as c:  # the slots were released
        assert c.get("/query/self", params={"q": QUESTION}).status_code == 200
        queries = c.get("/stats").json()["queries"]
        assert queries["active"] == 0 and queries["rejected"] >= 3


def test_cors_is_off_by_default_and_on_for_configured_origins(guarded: Server, server: Server) -> None:
    origin = {"Origin": "https://app.example"}
    with server.client() as c:
        assert "access-control-allow-origin" not in c.get("/healthz", headers=origin).headers
    with guarded.client() as c:
        allowed = c.get("/healthz", headers=origin)
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        other = c.get("/healthz", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
        preflight = c.options(
            "/query/self",
            headers={
                **origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert preflight.status_code == 200  # no token needed for a preflight


def test_settings_validate_early() -> None:
    with pytest.raises(ValueError):
        ServeSettings(max_concurrent_queries=0)
    with pytest.raises(ValueError):
        ServeSettings(cors_origins="https://a.example")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ServeSettings(query_timeout=-1)


@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "json"])
def test_json_bodies_are_the_same_with_or_without_orjson(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    import json

    from selfrag_core.serve import responses

    if not fast:
        monkeypatch.setattr(responses, "_ORJSON", None)
    elif responses._ORJSON is None:
        pytest.skip("orjson is not installed")
    body = {
        "answer": "Zürich — 北京",
        "score": 0.25,
        "n": 3,
        "ok": True,
        "none": None,
        "list": [1, "x", {"k": []}],
    }
    rendered = responses.FastJSONResponse(body).body
    assert json.loads(rendered) == body and "Zürich" in rendered.decode("utf-8")  # UTF-8, not \\u escapes
    assert rendered == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    keys = {1: "one", "nested": {2.5: True}}  # non-str keys become strings, as json.dumps does
    assert json.loads(responses.dumps(keys)) == json.loads(json.dumps(keys))
