"""Two ``selfrag serve`` replicas, separate processes, over one real Chroma server and one
real OpenAI-compatible model server (llama-cpp-python's, over SmolLM2), all on loopback.

What one replica writes the other answers from; with one replica SIGKILLed in the middle
of a burst of queries and writes, the other answers every query sent to it, the writes
the dead replica did not acknowledge are retried on the live one (as a load balancer
would) and the collection ends with every document exactly once; each replica's
``/metrics`` counts what it did. Queries use ``recursive`` with ``max_depth=0`` (one
retrieval, one answer: the cheapest path through the real model) and short replies.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .servers import free_port, start_replica, stop, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.integration]

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi", reason="selfrag serve needs pip install 'selfrag[serve]'")
pytest.importorskip("prometheus_client", reason="--metrics needs pip install 'selfrag[metrics]'")

QUESTION = "What is the capital of France?"
QUERY = {"question": QUESTION, "max_depth": 0}
FIRST = [
    {"text": "Paris is the capital of France. The city lies on the river Seine.", "source": "france"},
    {"text": "Berlin is the capital of Germany and its largest city.", "source": "germany"},
    {"text": "The Nile is the longest river in Africa and flows into the Mediterranean Sea."},  # no source
]
# written during the burst: through A (until it dies, then retried on B) and through B
THROUGH_A = [{"text": f"Town {i} of the north lies on lake {i}.", "source": f"a{i}"} for i in range(8)]
THROUGH_B = [{"text": f"Village {i} of the south grows olives.", "source": f"b{i}"} for i in range(4)]
BURST_QUERIES_B, BURST_QUERIES_A = 5, 3
READY_S = 120.0


def content_source(text: str) -> str:
    """The source the service gives a document sent without one (serve/documents.py)."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class Replica:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    documents_acked: int = 0  # documents this replica answered 200 for (re-sends included)
    queries_ok: int = 0
    failures: list[str] = field(default_factory=list)


@pytest.fixture
def replicas(chroma_server: tuple[str, int], openai_server: str, tmp_path: Path) -> Iterator[list[Replica]]:
    host, port = chroma_server
    options = [
        "--backend", f"chroma://{host}:{port}/replicas", "--embedder", "hashing",
        "--llm", "openai:smollm2", "--llm-base-url", openai_server, "--llm-max-tokens", "32",
        "--top-k", "3", "--timeout", "150", "--workers", "1", "--metrics", "--log-level", "warning",
    ]  # fmt: skip
    started: list[Replica] = []
    try:
        for name in ("A", "B"):
            port_ = free_port()
            log = tmp_path / f"replica-{name}.log"
            started.append(
                Replica(name, f"http://127.0.0.1:{port_}", start_replica(port_, options, log), log)
            )
        for r in started:
            wait_for(f"{r.url}/readyz", r.process, r.log, READY_S, f"replica {r.name}")
        yield started
    finally:
        for r in started:
            stop(r.process)


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample (0 when absent)."""
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        if m is None or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return 0.0


async def write(client: Any, replica: Replica, docs: list[dict[str, Any]]) -> dict[str, Any]:
    response = await client.post(f"{replica.url}/documents", json={"documents": docs})
    assert response.status_code == 200, response.text
    replica.documents_acked += len(docs)
    body: dict[str, Any] = response.json()
    return body


async def ask(client: Any, replica: Replica) -> dict[str, Any] | None:
    """The answer, or None when the replica is gone (connection refused or cut)."""
    try:
        response = await client.post(f"{replica.url}/query/recursive", json=QUERY)
    except httpx.TransportError as e:
        replica.failures.append(type(e).__name__)
        return None
    assert response.status_code == 200, (
        f"replica {replica.name}: {response.status_code} {response.text[:500]}"
    )
    replica.queries_ok += 1
    body: dict[str, Any] = response.json()
    return body


def answered_from(result: dict[str, Any], source: str) -> bool:
    return any(s["metadata"].get("source") == source for s in result["sources"])


async def scenario(a: Replica, b: Replica, chroma: tuple[str, int]) -> None:
    timeout = httpx.Timeout(200.0, connect=5.0)
    async with httpx.AsyncClient(timeout=timeout) as client:
        # 1. written through A (twice: the second time changes nothing), answered by B
        first = await write(client, a, FIRST)
        assert first["indexed"] == 3 and first["chunks"] == 3
        again = await write(client, a, FIRST)
        assert again["chunks"] == 0 and again["count"] == 3
        stats = (await client.get(f"{b.url}/stats")).json()
        assert stats["documents"] == 3
        result = await ask(client, b)
        assert result is not None and result["answer"].strip()
        assert answered_from(result, "france"), result["sources"]
        a_metrics = (await client.get(f"{a.url}/metrics")).text
        assert metric(a_metrics, "selfrag_documents_total", op="add") == 6

        # 2. a burst of queries (to both) and writes (through both); A is SIGKILLed mid-way
        a_done = asyncio.Event()
        taken = a.documents_acked

        async def write_through_a() -> list[str]:
            """One document at a time through A; once A is gone, the rest (and the one cut
            off) through B, as a load balancer's retry would."""
            moved: list[str] = []
            for doc in THROUGH_A:
                if not a_done.is_set():
                    try:
                        await write(client, a, [doc])
                        await asyncio.sleep(0.3)
                        continue
                    except httpx.TransportError:
                        a_done.set()
                await write(client, b, [doc])
                moved.append(doc["source"])
            return moved

        async def write_through_b() -> None:
            for doc in THROUGH_B:
                await write(client, b, [doc])
                await asyncio.sleep(0.3)
            await write(client, b, [FIRST[2]])  # sent through A before: the same content, one copy

        async def kill_a() -> None:
            """SIGKILL A once it has taken a write of the burst and holds queries in flight."""
            for _ in range(1200):
                active = (await client.get(f"{a.url}/stats")).json()["queries"]["active"]
                if active >= 1 and a.documents_acked > taken:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("A never had a query in flight and a write acknowledged")
            a.process.send_signal(signal.SIGKILL)
            a.process.wait(10)
            a_done.set()

        queries = [ask(client, b) for _ in range(BURST_QUERIES_B)] + [
            ask(client, a) for _ in range(BURST_QUERIES_A)
        ]
        *answers, moved, _, _ = await asyncio.gather(*queries, write_through_a(), write_through_b(), kill_a())
        b_answers = answers[:BURST_QUERIES_B]
        assert all(r is not None and r["answer"].strip() for r in b_answers), b_answers
        assert all(answered_from(r, "france") for r in b_answers if r is not None)
        assert a.process.returncode == -signal.SIGKILL
        assert a.failures, "A answered everything: it was killed after its queries, not mid-load"
        assert 0 < len(moved) < len(THROUGH_A), f"A should die between its writes; moved to B: {moved}"

        # 3. every document exactly once: in Chroma itself and through B
        import chromadb

        host, port = chroma
        collection = chromadb.HttpClient(host=host, port=port).get_collection("replicas")
        stored = collection.get(include=["metadatas"])
        sources = Counter(str(m["source"]) for m in stored["metadatas"] if m is not None)
        expected = {"france", "germany", content_source(FIRST[2]["text"])}
        expected |= {d["source"] for d in THROUGH_A + THROUGH_B}
        assert set(sources) == expected, sources
        assert all(n == 1 for n in sources.values()), sources  # each a one-chunk document
        assert len(stored["ids"]) == len(set(stored["ids"])) == len(expected)
        stats = (await client.get(f"{b.url}/stats")).json()
        assert stats["documents"] == len(expected)

        # 4. B's metrics count what B did
        text = (await client.get(f"{b.url}/metrics")).text
        assert metric(text, "selfrag_requests_total", strategy="recursive", status="200") == b.queries_ok
        assert b.queries_ok == 1 + BURST_QUERIES_B
        assert metric(text, "selfrag_documents_total", op="add") == b.documents_acked
        assert b.documents_acked == len(moved) + len(THROUGH_B) + 1
        assert metric(text, "selfrag_llm_calls_total", strategy="recursive") >= b.queries_ok
        assert metric(text, "selfrag_errors_total", strategy="recursive") == 0
        assert metric(text, "selfrag_request_seconds_count", strategy="recursive") == b.queries_ok


async def test_two_replicas_share_documents_and_survive_one_killed(
    replicas: list[Replica], chroma_server: tuple[str, int]
) -> None:
    a, b = replicas
    await scenario(a, b, chroma_server)
