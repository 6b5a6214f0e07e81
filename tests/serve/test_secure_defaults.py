"""Secure by default: ``create_app`` reads ``SELFRAG_API_TOKEN`` as ``selfrag serve`` does,
an open app says so, tokens are printable ASCII (refused at start otherwise), and a
misconfigured backend or LLM is answered with an error naming it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_helpers import TOKEN, ScriptedLLM, Server, make_rag, sse_events

from selfrag_core import Answer, SelfIRAG
from selfrag_core.engine import Plan, Retrieve
from selfrag_core.errors import ConfigurationError
from selfrag_core.serve import ServeSettings, create_app
from selfrag_core.serve.server import warn_if_open
from selfrag_core.serve.settings import TOKEN_ENV
from selfrag_core.strategies.base import Strategy

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MISCONFIGURED = (
    "the LLM BrokenClient raised TypeError: generate() takes 1 positional argument but 2 were given; "
    "fix the client's generate(prompt) signature"
)


def _misconfiguration() -> ConfigurationError:
    error = ConfigurationError(MISCONFIGURED)
    error.component = "LLM"  # as the core sets it (set here so the test holds either way)
    return error


class Misconfigured(Strategy[Answer]):
    """Retrieves, then stops as the engine does when the LLM client raised TypeError."""

    def _plan(self, query: str, context: dict[str, Any]) -> Plan[Answer]:
        yield Retrieve(self.rag_system, query, 3)
        raise _misconfiguration()


class MisconfiguredBackend:
    """A backend whose embedder is wired wrongly: every ingestion raises ConfigurationError."""

    def retrieve(self, query: str, top_k: int = 5) -> list[str]:
        return ["Paris is the capital of France."]

    def add_document(self, text: str, metadata: dict[str, Any]) -> int:
        raise ConfigurationError(
            "the embedder raised TypeError: embed_documents() got a str; fix the embedder"
        )


def _app(**kwargs: Any) -> Any:
    rag = kwargs.pop("rag", None) or make_rag()
    llm = ScriptedLLM()
    return create_app(rag=rag, llm=llm, strategies={"self": SelfIRAG(rag, llm)}, **kwargs)


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


# ---------------------------------------------------------------------- the token


def test_create_app_requires_the_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, f"  {TOKEN}\n")  # stripped, as `selfrag serve` strips it
    with Server(_app()) as server, server.client() as c:
        assert c.get("/healthz").status_code == 200
        for response in (
            c.get("/stats"),
            c.get("/query/self", params={"q": QUESTION}),
            c.post("/documents", json={"text": "Oslo is the capital of Norway."}),
            c.get("/stats", headers={"Authorization": "Bearer wrong"}),
        ):
            assert response.status_code == 401, response.text
            assert response.json()["error"]["type"] == "unauthorized"
        assert c.get("/stats", headers=AUTH).json()["limits"]["api_token"] is True
        assert c.get("/query/self", params={"q": QUESTION}, headers=AUTH).status_code == 200


def test_explicit_settings_open_the_app_and_an_ignored_token_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with caplog.at_level(logging.WARNING, logger="selfrag.serve"):
        app = _app(settings=ServeSettings(api_token=None))
    assert len(_warnings(caplog, TOKEN_ENV)) == 1  # the opt-out is explicit, and not silent
    with Server(app) as server, server.client() as c:
        assert c.get("/stats").status_code == 200
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="selfrag.serve"):
        kept = _app(settings=ServeSettings.from_env(max_top_k=5))  # the way to keep the token
    assert not _warnings(caplog, TOKEN_ENV) and kept.state.service.settings.api_token == TOKEN


def test_without_the_variable_the_app_is_open_on_loopback_quietly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with (
        caplog.at_level(logging.WARNING, logger="selfrag.serve"),
        Server(_app()) as server,
        server.client() as c,
    ):
        assert c.get("/stats").status_code == 200
    assert not _warnings(caplog, "no bearer token")


@pytest.mark.parametrize(
    ("client", "warned"),
    [(("203.0.113.7", 4000), 1), (("::ffff:10.1.2.3", 4000), 1), (("127.0.0.1", 4000), 0), (("::1", 1), 0)],
)
async def test_an_open_app_reached_from_another_host_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, client: tuple[str, int], warned: int
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    transport = httpx.ASGITransport(app=_app(), client=client)
    with caplog.at_level(logging.WARNING, logger="selfrag.serve"):
        async with httpx.AsyncClient(transport=transport, base_url="http://selfrag") as c:
            for _ in range(3):
                assert (await c.get("/stats")).status_code == 200
    records = _warnings(caplog, "no bearer token")
    assert len(records) == warned
    assert all(client[0] in r.getMessage() and TOKEN_ENV in r.getMessage() for r in records)


@pytest.mark.parametrize(
    ("host", "token", "warned"),
    [
        ("0.0.0.0", None, 1),
        ("::", None, 1),
        ("0.0.0.0", TOKEN, 0),
        ("127.0.0.1", None, 0),
        ("localhost", None, 0),
    ],
)
def test_selfrag_serve_warns_at_start_when_listening_beyond_loopback_without_a_token(
    caplog: pytest.LogCaptureFixture, host: str, token: str | None, warned: int
) -> None:
    with caplog.at_level(logging.WARNING, logger="selfrag.serve"):
        warn_if_open(host, token)
    assert len(_warnings(caplog, TOKEN_ENV)) == warned


def test_serve_forever_checks_the_app_it_serves(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import gc

    from selfrag_core.serve import server

    class Uvicorn:
        @staticmethod
        def run(app: Any, **options: Any) -> None:
            pass

    monkeypatch.setattr(server, "_uvicorn", lambda: Uvicorn)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    try:
        with caplog.at_level(logging.WARNING, logger="selfrag.serve"):
            server.serve_forever(_app(), "0.0.0.0", 0)
    finally:
        gc.unfreeze()
    assert len(_warnings(caplog, "listening on 0.0.0.0 without a bearer token")) == 1


@pytest.mark.parametrize(
    "token",
    ["pässwörd", "zqx\u00e9", "zq\u00a0x9", " zqx9", "zqx9 ", "zq x9", "zqx\x00", "zq\nx9", "zqx\x7f"],
    ids=["utf8", "latin1", "nbsp", "leading-space", "trailing-space", "inner-space", "nul", "newline", "del"],
)
def test_a_token_outside_printable_ascii_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    with pytest.raises(ConfigurationError, match="printable ASCII") as refused:
        ServeSettings(api_token=token)
    assert token.strip()[:3] not in str(refused.value)  # the message never shows the token
    if token.strip() != token:
        assert ServeSettings.from_env({TOKEN_ENV: token}).api_token == token.strip()  # stripped there
        return
    with pytest.raises(ConfigurationError, match=TOKEN_ENV):
        ServeSettings.from_env({TOKEN_ENV: token})
    if "\x00" not in token:  # an environment cannot hold NUL
        monkeypatch.setenv(TOKEN_ENV, token)
        with pytest.raises(ConfigurationError, match=TOKEN_ENV):
            _app()  # create_app refuses to start, as `selfrag serve` does


def test_the_header_is_compared_as_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Non-ASCII header bytes (UTF-8 or latin-1) never match and are a 401, not a 500;
    the scheme is case-insensitive and extra spaces before the token are ignored."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with Server(_app()) as server, server.client() as c:
        for raw in (
            b"Bearer " + "s3cret-tökén".encode(),
            b"Bearer " + "s3cret-tökén".encode("latin-1"),
            b"Bearer " + TOKEN.encode() + b"\xc3\xa9",
            b"Basic " + TOKEN.encode(),
        ):
            response = c.get("/stats", headers={"Authorization": raw})
            assert response.status_code == 401, raw
        for good in (f"Bearer {TOKEN}", f"bearer {TOKEN}", f"Bearer   {TOKEN}"):
            assert c.get("/stats", headers={"Authorization": good}).status_code == 200, good


# ---------------------------------------------------------------------- misconfiguration


@pytest.fixture(scope="module")
def misconfigured() -> Iterator[Server]:
    backend = MisconfiguredBackend()
    llm = ScriptedLLM()
    app = create_app(
        rag=backend,
        llm=llm,
        strategies={"misconfigured": Misconfigured(backend, llm)},
        settings=ServeSettings(api_token=None),
    )
    with Server(app) as server:
        yield server


def _assert_names_the_cause(body: dict[str, Any], component: str | None = "LLM") -> None:
    error = body["error"]
    assert error["status"] == 500 and error["type"] == "configuration_error"
    assert error["message"].startswith("ConfigurationError: ") and "TypeError" in error["message"]
    assert "fix" in error["message"]
    if component is not None:
        assert body["component"] == component


def _logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "selfrag.serve" and r.levelno >= logging.ERROR]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_configuration_error_in_a_query_is_a_500_naming_it(
    misconfigured: Server, caplog: pytest.LogCaptureFixture, method: str
) -> None:
    with misconfigured.client() as c, caplog.at_level(logging.INFO, logger="selfrag.serve"):
        if method == "GET":
            response = c.get("/query/misconfigured", params={"q": QUESTION})
        else:
            response = c.post("/query/misconfigured", json={"question": QUESTION})
        assert response.status_code == 500
        body = response.json()
        _assert_names_the_cause(body)
        assert MISCONFIGURED in body["error"]["message"]
        assert c.get("/healthz").status_code == 200  # and the server keeps serving
        queries = c.get("/stats").json()["queries"]
        assert queries["active"] == 0 and queries["failed"] >= 1
    logged = _logged(caplog)
    assert len(logged) == 1 and MISCONFIGURED in logged[0].getMessage()  # once


def test_a_configuration_error_in_a_stream_is_an_error_event_naming_it(
    misconfigured: Server, caplog: pytest.LogCaptureFixture
) -> None:
    params = {"q": QUESTION, "stream": "true"}
    with (
        misconfigured.client() as c,
        caplog.at_level(logging.INFO, logger="selfrag.serve"),
        c.stream("GET", "/query/misconfigured", params=params) as streamed,
    ):
        assert streamed.status_code == 200  # the headers went out before the failure
        events = list(sse_events(streamed.iter_lines))
    names = [e for e, _ in events]
    assert names[0] == "start" and "trace" in names and names[-1] == "error"  # the retrieval, then the error
    _assert_names_the_cause(events[-1][1])
    assert len(_logged(caplog)) == 1


def test_a_configuration_error_in_ingestion_is_a_500_not_a_400(
    misconfigured: Server, caplog: pytest.LogCaptureFixture
) -> None:
    with misconfigured.client() as c, caplog.at_level(logging.INFO, logger="selfrag.serve"):
        response = c.post("/documents", json={"text": "Oslo is the capital of Norway.", "source": "oslo"})
    assert response.status_code == 500
    _assert_names_the_cause(response.json(), component=None)
    assert "embedder" in response.json()["error"]["message"]
    assert len(_logged(caplog)) == 1


@pytest.mark.parametrize("value", ["", "   "])
def test_a_token_variable_set_but_empty_is_an_error_not_an_open_service(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SELFRAG_API_TOKEN=$TOKEN`` with TOKEN unset must not silently serve an open API."""
    with pytest.raises(ConfigurationError, match="set but empty"):
        ServeSettings.from_env({TOKEN_ENV: value})
    monkeypatch.setenv(TOKEN_ENV, value)
    with pytest.raises(ConfigurationError, match="set but empty"):
        create_app(rag=make_rag(), llm=ScriptedLLM())
    monkeypatch.delenv(TOKEN_ENV)
    assert ServeSettings.from_env().api_token is None  # unset: an open service, by choice


def test_the_default_strategies_get_the_verifier_given_and_passed_strategies_keep_theirs() -> None:
    from selfrag_core.verify import LexicalVerifier

    rag, llm, verifier = make_rag(), ScriptedLLM(), LexicalVerifier(threshold=0.7)
    app = create_app(rag=rag, llm=llm, settings=ServeSettings(api_token=None), verifier=verifier)
    served = app.state.service.strategies
    assert {"plain", "self", "hyde", "recursive", "healing"} <= set(served)
    assert all(strategy.verifier is verifier for strategy in served.values())
    with pytest.raises(ConfigurationError, match="carry their own"):
        create_app(rag=rag, llm=llm, strategies={"self": SelfIRAG(rag, llm)}, verifier=verifier)
    with pytest.raises(TypeError, match="verifier must have verify"):
        create_app(rag=rag, llm=llm, verifier="lexical")
