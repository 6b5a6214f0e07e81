"""The query endpoints through a real uvicorn server: results, options, bad input."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import pytest
from serve_helpers import ANSWER, Server

from selfrag_core.serve import models

pytestmark = pytest.mark.integration

QUESTION = "What is the capital of France?"
STRATEGY_KEYS = {
    "self": {"confidence", "iterations", "history"},
    "hyde": {"hypothetical_docs_generated", "num_retrieved", "num_ranked"},
    "recursive": {"decomposed", "depth", "sub_questions", "sub_answers"},
    "healing": {"success", "attempts", "scores", "attempt_details"},
}


@pytest.mark.parametrize("name", sorted(STRATEGY_KEYS))
def test_get_and_post_answer_with_sources_and_trace(client: httpx.Client, name: str) -> None:
    for response in (
        client.get(f"/query/{name}", params={"q": QUESTION}),
        client.post(f"/query/{name}", json={"question": QUESTION}),
    ):
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["answer"] == ANSWER
        assert STRATEGY_KEYS[name] <= body.keys()
        assert any(s["metadata"].get("source") == "france.txt" for s in body["sources"])
        assert body["trace"]["llm_calls"] >= 1
        assert {e["kind"] for e in body["trace"]["events"]} >= {"llm", "retrieval"}
        # both sentences of the answer are in france.txt: each a citation with its source
        assert [c["sentence"] for c in body["citations"]] == ANSWER.replace(". ", ".\n").splitlines()
        assert all(c["supported_by"] and c["flags"] == [] for c in body["citations"])


def test_top_k_option_reaches_the_retrieval(client: httpx.Client) -> None:
    body = client.post("/query/self", json={"question": QUESTION, "top_k": 1}).json()
    retrievals = [e for e in body["trace"]["events"] if e["kind"] == "retrieval"]
    assert retrievals and all(e["detail"]["top_k"] == 1 for e in retrievals)
    assert len(body["sources"]) == 1
    body = client.get("/query/hyde", params={"q": QUESTION, "top_k": "2"}).json()
    assert {e["detail"]["top_k"] for e in body["trace"]["events"] if e["kind"] == "retrieval"} == {2}


#: the options under the configs' names, and under their old names (deprecated, still accepted)
STRICT = [
    {"confidence_threshold": 1.0, "max_refinement_iterations": 2},
    {"threshold": 1.0, "max_iterations": 2},
]


@pytest.mark.parametrize("options", STRICT, ids=["config names", "old names"])
def test_threshold_and_iterations_change_the_loop_per_request_only(
    client: httpx.Client, options: dict[str, float]
) -> None:
    body = client.post("/query/self", json={"question": QUESTION, **options}).json()
    assert body["iterations"] == 2  # confidence 0.9 < 1.0: refined once, capped at 2
    assert client.get("/query/self", params={"q": QUESTION, **options}).json()["iterations"] == 2
    default = client.post("/query/self", json={"question": QUESTION}).json()
    assert default["iterations"] == 1  # the shared instance kept its own settings


def test_an_old_option_name_is_logged_once_naming_the_new_one(caplog: pytest.LogCaptureFixture) -> None:
    models._deprecated.cache_clear()
    with caplog.at_level(logging.WARNING, logger="selfrag.serve"):
        models.QueryRequest.model_validate({"question": QUESTION, "confidence_threshold": 0.5})
        assert caplog.messages == []  # the config's name: nothing to say
        for _ in range(2):
            request = models.QueryRequest.model_validate({"question": QUESTION, **STRICT[1]})
    assert (request.confidence_threshold, request.max_refinement_iterations) == (1.0, 2)
    assert caplog.messages == [
        "selfrag serve: the query option 'max_iterations' is deprecated; send 'max_refinement_iterations'",
        "selfrag serve: the query option 'threshold' is deprecated; send 'confidence_threshold'",
    ]  # once each, however many requests use it
    old = models.OPTIONS_ACCEPTED - models.OPTIONS
    assert old == {"max_iterations", "threshold"}


def test_healing_takes_threshold_and_top_k_per_request(client: httpx.Client) -> None:
    options = {"question": QUESTION, "confidence_threshold": 0.5, "top_k": 2}
    body = client.post("/query/healing", json=options).json()
    assert body["threshold"] == 0.5
    assert {e["detail"]["top_k"] for e in body["trace"]["events"] if e["kind"] == "retrieval"} == {2}
    assert client.get("/query/healing", params={"q": QUESTION}).json()["threshold"] == 0.75


def test_stats_show_each_strategy_with_what_it_tells(client: httpx.Client) -> None:
    shown = client.get("/stats").json()["strategies"]
    assert shown["self"]["class"] == "SelfIRAG" and shown["self"]["max_refinement_iterations"] == 3
    assert shown["hyde"] == {"class": "HyDERAG"}  # (Strategy.get_stats: nothing by default)


@pytest.mark.parametrize("option", ["max_refinement_iterations", "max_iterations"])
def test_option_a_strategy_lacks_is_422(client: httpx.Client, option: str) -> None:
    response = client.post("/query/hyde", json={"question": QUESTION, option: 2})
    assert response.status_code == 422
    message = "option 'max_refinement_iterations' does not apply to HyDERAG"  # by its config name
    assert response.json()["error"]["message"] == message


def test_an_option_and_its_old_name_together_are_422(client: httpx.Client) -> None:
    both = {"question": QUESTION, "confidence_threshold": 0.5, "threshold": 0.5}
    assert client.post("/query/self", json=both).status_code == 422


def test_unknown_strategy_is_404_listing_the_known_ones(client: httpx.Client) -> None:
    for response in (
        client.get("/query/magic", params={"q": QUESTION}),
        client.post("/query/magic", json={}),
    ):
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["type"] == "unknown_strategy" and error["status"] == 404
        assert "hyde" in error["message"]


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        ({"question": ""}, 400),
        ({"question": "   \n\t"}, 400),
        ({"question": "x" * 501}, 400),  # over max_question_chars=500
        ({"question": 42}, 422),
        ({"question": ["a"]}, 422),
        ({"question": QUESTION, "top_k": "3"}, 422),
        ({"question": QUESTION, "top_k": 0}, 422),
        ({"question": QUESTION, "top_k": 51}, 422),  # over max_top_k
        ({"question": QUESTION, "threshold": 2}, 422),
        ({"question": QUESTION, "confidence_threshold": 2}, 422),
        ({"question": QUESTION, "stream": "yes"}, 422),
        ({"question": QUESTION, "surprise": 1}, 422),
        ({}, 422),
        ([QUESTION], 422),
    ],
)
def test_bad_questions_and_types(client: httpx.Client, payload: object, status: int) -> None:
    response = client.post("/query/self", json=payload)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["status"] == status and error["message"] and error["type"]
    assert "Traceback" not in response.text


def test_bad_get_parameters(client: httpx.Client) -> None:
    assert client.get("/query/self").status_code == 422  # no q
    assert client.get("/query/self", params={"q": ""}).status_code == 400
    assert client.get("/query/self", params={"q": QUESTION, "top_k": "many"}).status_code == 422


def test_malformed_and_non_utf8_bodies_are_400(client: httpx.Client) -> None:
    headers = {"Content-Type": "application/json"}
    broken = client.post("/query/self", content=b'{"question": ', headers=headers)
    assert broken.status_code == 400 and broken.json()["error"]["type"] == "invalid_json"
    latin1 = client.post("/query/self", content='{"question": "café"}'.encode("latin-1"), headers=headers)
    assert latin1.status_code == 400 and "UTF-8" in latin1.json()["error"]["message"]


def test_arabic_question_round_trips(client: httpx.Client) -> None:
    response = client.get("/query/self", params={"q": "ما هي عاصمة فرنسا؟"})
    assert response.status_code == 200
    assert response.json()["history"][0]["query"] == "ما هي عاصمة فرنسا؟"


def test_timeout_is_504_with_the_partial_trace(client: httpx.Client) -> None:
    start = time.perf_counter()
    response = client.post("/query/slow", json={"question": QUESTION, "timeout": 0.1})
    assert time.perf_counter() - start < 3
    assert response.status_code == 504
    body = response.json()
    assert body["error"]["type"] == "query_timeout"
    assert any(e["kind"] == "retrieval" for e in body["trace"]["events"])  # the part that ran


def test_llm_budget_is_504_with_the_partial_trace(client: httpx.Client, llm: object) -> None:
    payload = {"question": QUESTION, "max_llm_calls": 1, "confidence_threshold": 1.0}  # a refinement call
    response = client.post("/query/self", json=payload)
    assert response.status_code == 504
    body = response.json()
    assert body["error"]["type"] == "budget_exceeded" and "1 LLM call" in body["error"]["message"]
    llm_events = [e for e in body["trace"]["events"] if e["kind"] == "llm"]
    assert len([e for e in llm_events if "error" not in e]) == 1
    assert any(e.get("error", "").startswith("BudgetExceededError") for e in llm_events)
    assert body["result"]["answer"] == ANSWER  # the fallback result is kept beside the trace


def test_queries_run_concurrently_on_the_event_loop(server: Server, slow_llm: object) -> None:
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as c:
            return list(
                await asyncio.gather(*(c.get("/query/slow", params={"q": QUESTION}) for _ in range(8)))
            )

    calls_before = len(slow_llm.calls)  # type: ignore[attr-defined]
    start = time.perf_counter()
    responses = asyncio.run(burst())
    elapsed = time.perf_counter() - start
    assert [r.status_code for r in responses] == [200] * 8
    assert elapsed < 1.5, elapsed  # 8 x 0.3 s = 2.4 s if they ran one after another
    new_calls = slow_llm.calls[calls_before:]  # type: ignore[attr-defined]
    assert new_calls and all(c.is_async for c in new_calls)
    assert {c.thread for c in new_calls} == {"uvicorn-test"}  # no thread per request


def test_openapi_schema_is_typed(client: httpx.Client) -> None:
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    for name in STRATEGY_KEYS:
        assert {"get", "post"} <= paths[f"/query/{name}"].keys()
    post = paths["/query/self"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/QueryRequest")
    assert post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/QueryResponse"
    )
    assert "504" in post["responses"] and "/documents" in paths and "/documents/{source}" in paths
    request = schema["components"]["schemas"]["QueryRequest"]
    assert {"question", "top_k", "stream", "max_llm_calls"} <= request["properties"].keys()
    assert request["additionalProperties"] is False
    params = {p["name"] for p in paths["/query/self"]["get"]["parameters"]}
    assert {"q", "top_k", "stream"} <= params


def test_unknown_route_and_method_use_the_error_shape(client: httpx.Client) -> None:
    missing = client.get("/nowhere")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
    wrong = client.put("/query/self", json={})
    assert wrong.status_code in (404, 405) and "error" in wrong.json()


def test_no_conversation_memory_leaks_between_requests(client: httpx.Client, server: Server) -> None:
    healing = server.state.strategies["healing"]
    for question in ("What is the capital of France?", "Which river flows through Paris?"):
        assert client.get("/query/healing", params={"q": question}).status_code == 200
    assert healing.memory is None  # no conversation kept on the shared instance
    llm = server.state.llm
    assert not any("Conversation so far" in p for p in llm.prompts)
