"""Deterministic test doubles, shipped so users can test their own pipelines offline.

``FakeLLM`` answers from a script: a fixed reply, a list of replies (in order), a
function of the prompt, or ``{substring: reply}`` rules. It can sleep (sync or
async) to simulate latency, fail on chosen calls, and logs every call. It works
with sync and async code. ``FakeRetriever`` is an in-memory keyword backend, writable
(it passes the backend conformance suite, :mod:`selfrag_core.conformance`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfrag_core.ingest import chunk_id, content_source, document_parts
from selfrag_core.types import RetrievedDoc, ScoreKind

Reply = str | BaseException
Script = str | Sequence[Reply] | Mapping[str, Reply] | Callable[[str], Reply]


@dataclass
class FakeCall:
    prompt: str
    is_async: bool
    start: float
    end: float = 0.0
    schema: dict[str, Any] | None = None
    thread: str = ""


class FakeLLM:
    """A scripted LLM.

    ``script``:
      * a string: always that reply;
      * a sequence: the replies in order (the last repeats when the list runs out,
        unless ``cycle=True``); an exception instance in it is raised instead;
      * a mapping: the first key found in the prompt (as a substring) picks the
        reply; ``default`` answers otherwise;
      * a callable ``f(prompt) -> str``.
    ``latency``: seconds each call takes (``time.sleep`` / ``asyncio.sleep``).
    ``fail_on``: 1-based call numbers that raise ``error`` instead of answering.
    ``structured``: also expose ``generate_structured`` (the schema is logged).
    """

    def __init__(
        self,
        script: Script = "fake answer",
        *,
        latency: float = 0.0,
        fail_on: Iterable[int] = (),
        error: BaseException | None = None,
        default: str = "fake answer",
        cycle: bool = False,
    ) -> None:
        self.script = script
        self.latency = latency
        self.fail_on = set(fail_on)
        self.error = error or ConnectionError("simulated LLM outage")
        self.default = default
        self.cycle = cycle
        self.calls: list[FakeCall] = []
        self._lock = threading.Lock()
        self._index = 0

    # ---------------------------------------------------------------- scripting
    def _next(self, prompt: str) -> Reply:
        script = self.script
        if isinstance(script, str):
            return script
        if callable(script):
            return script(prompt)
        if isinstance(script, Mapping):
            for key, reply in script.items():
                if key in prompt:
                    return reply
            return self.default
        with self._lock:
            i = self._index
            self._index += 1
        if not script:
            return self.default
        return script[i % len(script)] if self.cycle else script[min(i, len(script) - 1)]

    def _begin(self, prompt: str, is_async: bool, schema: dict[str, Any] | None) -> tuple[FakeCall, int]:
        call = FakeCall(
            prompt, is_async, time.perf_counter(), schema=schema, thread=threading.current_thread().name
        )
        with self._lock:
            self.calls.append(call)
            number = len(self.calls)
        return call, number

    def _finish(self, call: FakeCall, number: int) -> str:
        call.end = time.perf_counter()
        if number in self.fail_on:
            raise self.error
        reply = self._next(call.prompt)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def _call(self, prompt: str, schema: dict[str, Any] | None = None) -> str:
        call, n = self._begin(prompt, False, schema)
        if self.latency:
            time.sleep(self.latency)
        return self._finish(call, n)

    async def _acall(self, prompt: str, schema: dict[str, Any] | None = None) -> str:
        call, n = self._begin(prompt, True, schema)
        await asyncio.sleep(self.latency)
        return self._finish(call, n)

    # ---------------------------------------------------------------- LLM protocol
    def generate(self, prompt: str) -> str:
        return self._call(prompt)

    async def agenerate(self, prompt: str) -> str:
        return await self._acall(prompt)

    # ---------------------------------------------------------------- inspection
    @property
    def n_calls(self) -> int:
        return len(self.calls)

    @property
    def prompts(self) -> list[str]:
        return [c.prompt for c in self.calls]

    def rounds(self) -> int:
        """Groups of calls that overlapped in time (dependent rounds, with latency > 0)."""
        spans = sorted((c.start, c.end) for c in self.calls)
        rounds, end = 0, float("-inf")
        for s, e in spans:
            if s > end:
                rounds += 1
                end = e
            else:
                end = max(end, e)
        return rounds

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self._index = 0


class FakeStructuredLLM(FakeLLM):
    """A FakeLLM that also accepts a JSON schema (like a grammar-constrained model)."""

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> str:
        return self._call(prompt, schema)

    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> str:
        return await self._acall(prompt, schema)


class SyncOnlyFakeLLM(FakeLLM):
    """A FakeLLM without a native async API (exercises the thread fallback)."""

    agenerate = None  # type: ignore[assignment]

    def __getattribute__(self, name: str) -> Any:
        if name == "agenerate":
            raise AttributeError(name)
        return super().__getattribute__(name)


_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass
class FakeRetriever:
    """An in-memory backend: scores documents by shared words with the query.

    ``fail``: raise this exception on every retrieval. ``latency``: seconds per call.
    Scores are similarities (fraction of query words present).

    It keeps the write contract (:class:`~selfrag_core.ingest.WritableBackend`):
    ``add_documents`` stores each document whole (one chunk, id
    :func:`~selfrag_core.ingest.chunk_id`), replacing its source's earlier text;
    ``delete(source)``, ``count()``, ``sources()``.
    """

    documents: list[str] = field(default_factory=list)
    latency: float = 0.0
    fail: BaseException | None = None
    queries: list[str] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    score_kind: str = "similarity"

    def add_document(self, text: str, metadata: dict[str, Any] | None = None) -> int:
        self.documents.append(text)
        self.metadata.append(dict(metadata or {}))
        return len(self.documents) - 1

    def _ids(self) -> list[str | None]:
        """The stable ids of the documents ``add_documents`` stored (None: a position id)."""
        ids: list[str | None] = self.__dict__.setdefault("_stable_ids", [])
        ids.extend([None] * (len(self.documents) - len(ids)))
        return ids

    def _source_of(self, i: int) -> Any:
        return self.metadata[i].get("source") if i < len(self.metadata) else None

    def add_documents(self, documents: Iterable[Mapping[str, Any]]) -> int:
        """Store each document as one chunk (all checked first); the number newly stored."""
        parts = [document_parts(doc) for doc in documents]
        added = 0
        for text, source, metadata in parts:
            source = source if source is not None else content_source(text, metadata)
            if any(self._source_of(i) == source and t == text for i, t in enumerate(self.documents)):
                continue  # stored already
            self.delete(source)
            ids = self._ids()
            self.metadata.extend({} for _ in range(len(self.documents) - len(self.metadata)))
            self.documents.append(text)
            self.metadata.append({**metadata, "source": source})
            ids.append(chunk_id(source, text))
            added += 1
        return added

    def delete(self, source: str) -> int:
        """Remove every document of ``source``; how many went."""
        ids = self._ids()
        keep = [i for i in range(len(self.documents)) if self._source_of(i) != source]
        removed = len(self.documents) - len(keep)
        if removed:
            self.documents[:] = [self.documents[i] for i in keep]
            self.metadata[:] = [self.metadata[i] if i < len(self.metadata) else {} for i in keep]
            ids[:] = [ids[i] for i in keep]
            self.__dict__.pop("_vocab_cache", None)
        return removed

    def count(self) -> int:
        return len(self.documents)

    def sources(self) -> set[str]:
        return {str(s) for s in map(self._source_of, range(len(self.documents))) if s is not None}

    def _vocab(self, i: int) -> frozenset[str]:
        cache = self.__dict__.setdefault("_vocab_cache", {})
        key = (i, self.documents[i])
        if key not in cache:
            cache[key] = frozenset(w.casefold() for w in _WORD.findall(self.documents[i]))
        return cache[key]  # type: ignore[no-any-return]

    def _search(self, query: str, top_k: int) -> list[RetrievedDoc]:
        self.queries.append(query)
        if self.fail is not None:
            raise self.fail
        words = {w.casefold() for w in _WORD.findall(query)}
        scored = []
        ids = self._ids()
        for i, text in enumerate(self.documents):
            score = len(words & self._vocab(i)) / max(len(words), 1)
            if score > 0:
                meta = self.metadata[i] if i < len(self.metadata) else {}
                doc_id = ids[i] or f"doc-{i}"
                scored.append(RetrievedDoc(text, score, dict(meta), doc_id, ScoreKind.SIMILARITY))
        scored.sort(key=lambda d: -(d.score or 0.0))
        return scored[:top_k]

    def retrieve(self, query: str, top_k: int = 5) -> list[RetrievedDoc]:
        if self.latency:
            time.sleep(self.latency)
        return self._search(query, top_k)

    async def aretrieve(self, query: str, top_k: int = 5) -> list[RetrievedDoc]:
        await asyncio.sleep(self.latency)
        return self._search(query, top_k)


def judge_json(
    answer: str | None = None,
    score: float = 9,
    *,
    issues: list[str] | None = None,
    suggestions: list[str] | None = None,
    **extra: Any,
) -> str:
    """A scripted judge reply for SelfIRAG: four equal scores on the 0-10 scale.

    With ``answer`` it is a fast-mode reply (answer and evaluation in one object).
    """
    data: dict[str, Any] = dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), score)
    data |= {"issues": list(issues or []), "suggestions": list(suggestions or [])}
    if answer is not None:
        data = {"answer": answer, **data}
    data.update(extra)
    return json.dumps(data)


#: a prompt's document (``prompts.document_block``): "[n] " at the margin, an optional
#: "(source: ...; note)" label, the text, its further lines indented by one space
_DOCUMENT = re.compile(r'^\[(\d+)\] (?:\((?:source: |[a-z_]+=")[^()\n]*\) )?(.*(?:\n .*)*)', re.MULTILINE)


def prompt_documents(prompt: str) -> list[str]:
    """The texts of the documents a prompt shows, in order (the numbered ``[n] text``
    lines every prompt uses): for scripted LLMs that answer from their context."""
    return [text.replace("\n ", "\n") for _, text in _DOCUMENT.findall(prompt)]


def first_document(prompt: str, default: str = "") -> str:
    """The first line of the prompt's first document, or ``default``."""
    documents = prompt_documents(prompt)
    return documents[0].strip().split("\n", 1)[0] if documents else default


# --------------------------------------------------------------------- a real Chroma server


def chroma_executable() -> str | None:
    """The ``chroma`` command next to this interpreter, else on the PATH, else None."""
    local = Path(sys.executable).with_name("chroma")
    return str(local) if local.exists() else shutil.which("chroma")


@contextlib.contextmanager
def chroma_server(directory: str | Path, *, timeout: float = 60.0) -> Iterator[tuple[str, int]]:
    """A real Chroma server (``chroma run`` on loopback, a free port, its data and log in
    ``directory``) for tests: yields ``(host, port)`` once it answers its heartbeat, and
    stops it on exit. Chroma's default ONNX embedding function is made to fail if anything
    calls it (it would download a model): every vector must come from an embedder.
    Raises LookupError when the ``chroma`` command is not installed (``pip install
    chromadb``), RuntimeError when the server does not start within ``timeout``."""
    exe = chroma_executable()
    if exe is None:
        raise LookupError("the chroma server executable is not installed (pip install chromadb)")
    from chromadb.utils.embedding_functions import onnx_mini_lm_l6_v2

    def no_download(self: Any) -> None:
        raise AssertionError("a test tried to download Chroma's default ONNX embedding model")

    onnx_mini_lm_l6_v2.ONNXMiniLM_L6_V2._download_model_if_not_exists = no_download  # type: ignore[method-assign]
    path = Path(directory)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with (path / "server.log").open("w") as log:
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        server = subprocess.Popen(
            [exe, "run", "--path", str(path / "data"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an HTTP proxy
        try:
            deadline = time.monotonic() + timeout
            while True:  # a client needs a live server: wait on the heartbeat first
                try:
                    with direct.open(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=2):
                        break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"chroma server did not start; see {path / 'server.log'}"
                        ) from None
                    time.sleep(0.2)
            yield "127.0.0.1", port
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
