"""Backend output is read or reported, never silently dropped (issue 16, section 4).

Non-finite scores are no score in every format; 3-tuples with metadata and bytes are
read; what cannot be read is described (``Retrieved.unreadable``), or raised as a
``RetrievalError`` when nothing could be; copies are merged before ``top_k`` is taken.
Each over the sync, async and batched (``retrieve_many``) paths, and end to end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from selfrag_core import (
    HyDERAG,
    RecursiveRAG,
    RetrievalError,
    RetrievedDoc,
    ScoreKind,
    SelfHealingRAG,
    SelfIRAG,
)
from selfrag_core.retrieval import (
    Retrieved,
    _aretrieve_safe,
    _retrieve_safe,
    normalize_results,
    resolve_backend,
)
from selfrag_core.testing import FakeLLM
from selfrag_core.testing import judge_json as judged

# ---------------------------------------------------------------------- backends


class Backend:
    """Returns ``output`` whatever it is asked (so it may return more than top_k)."""

    score_kind = "similarity"  # declared: a non-finite score must still come out unknown

    def __init__(self, output: Any) -> None:
        self.output = output
        self.calls: list[tuple[str, int]] = []

    def retrieve(self, query: str, top_k: int) -> Any:
        self.calls.append((query, top_k))
        return self.output


class AsyncBackend(Backend):
    async def aretrieve(self, query: str, top_k: int) -> Any:
        self.calls.append((query, top_k))
        return self.output


class ManyBackend(Backend):
    def retrieve_many(self, queries: list[str], top_k: int) -> Any:
        self.calls += [(q, top_k) for q in queries]
        return [self.output for _ in queries]


class AsyncManyBackend(Backend):
    async def aretrieve_many(self, queries: list[str], top_k: int) -> Any:
        self.calls += [(q, top_k) for q in queries]
        return [self.output for _ in queries]


#: the retrieval paths: one query sync / async, a batch sync / async
MODES = {"sync": Backend, "async": AsyncBackend, "many": ManyBackend, "amany": AsyncManyBackend}


async def retrieve_from(mode: str, backend: Backend, top_k: int = 5) -> Retrieved:
    """One retrieval for the query "q" through the path ``mode`` names."""
    if mode == "sync":
        return _retrieve_safe(backend, "q", top_k)
    if mode == "async":
        return await _aretrieve_safe(backend, "q", top_k)
    if mode == "many":
        (docs,) = resolve_backend(backend).retrieve_many(["q"], top_k)
    else:
        (docs,) = await resolve_backend(backend).aretrieve_many(["q"], top_k)
    return docs


async def retrieve(mode: str, output: Any, top_k: int = 5) -> Retrieved:
    return await retrieve_from(mode, MODES[mode](output), top_k)


# stand-ins for framework objects, as in test_retrieval.py


class Document:  # shaped like langchain_core.documents.Document
    def __init__(self, page_content: str, metadata: dict[str, Any] | None = None) -> None:
        self.page_content, self.metadata, self.id = page_content, metadata or {}, None


class TextNode:  # shaped like a LlamaIndex node
    def __init__(self, text: str, node_id: str) -> None:
        self._text, self.node_id, self.metadata = text, node_id, {}

    def get_content(self) -> str:
        return self._text


class NodeWithScore:
    def __init__(self, node: Any, score: float | None) -> None:
        self.node, self.score = node, score


class HaystackDoc:
    def __init__(self, content: str, score: float) -> None:
        self.content, self.meta, self.score, self.id = content, {}, score, "h1"


def texts(docs: list[RetrievedDoc]) -> list[str]:
    return [d.text for d in docs]


def json_safe(doc: RetrievedDoc) -> dict[str, Any]:
    out = doc.to_dict()
    json.dumps(out, allow_nan=False)  # raises on NaN or Infinity
    return out


# ---------------------------------------------------------------------- non-finite scores

NON_FINITE = [float("inf"), float("-inf"), float("nan")]

SCORED_FORMATS: dict[str, Callable[[float], Any]] = {
    "(text, score)": lambda s: [("alpha", s)],
    "(score, text)": lambda s: [(s, "alpha")],
    "(numpy score, text)": lambda s: [(np.float32(s), "alpha")],
    "(text, score, metadata)": lambda s: [("alpha", s, {"k": 1})],
    "(score, text, metadata)": lambda s: [(s, "alpha", {"k": 1})],
    "dict score": lambda s: [{"text": "alpha", "score": s}],
    "dict distance": lambda s: [{"text": "alpha", "distance": s}],
    "dict similarity": lambda s: [{"content": "alpha", "similarity": s}],
    "object .score": lambda s: [SimpleNamespace(text="alpha", score=s)],
    "(Document, score)": lambda s: [(Document("alpha"), s)],
    "(score, Document)": lambda s: [(s, Document("alpha"))],
    "NodeWithScore": lambda s: [NodeWithScore(TextNode("alpha", "n1"), s)],
    "Haystack Document": lambda s: [HaystackDoc("alpha", s)],
    "RetrievedDoc": lambda s: [RetrievedDoc("alpha", s, score_kind=ScoreKind.SIMILARITY)],
    "RetrievedDoc among others": lambda s: [RetrievedDoc("alpha", s, score_kind=ScoreKind.DISTANCE), 7],
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("score", NON_FINITE, ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("fmt", list(SCORED_FORMATS))
async def test_a_non_finite_score_is_no_score_in_every_format(mode: str, score: float, fmt: str) -> None:
    docs = await retrieve(mode, SCORED_FORMATS[fmt](score))
    assert texts(docs) == ["alpha"]
    (doc,) = docs
    assert doc.score is None and doc.score_kind is ScoreKind.UNKNOWN and doc.similarity is None
    out = json_safe(doc)
    assert out["score"] is None and out["score_kind"] == "unknown"


def test_finite_scores_are_kept_as_they_were() -> None:
    (a,) = _retrieve_safe(Backend([(0.25, "alpha")]), "q")
    (b,) = _retrieve_safe(Backend([("alpha", np.float32(0.5))]), "q")
    assert (a.score, a.score_kind, b.score, b.score_kind) == (
        0.25,
        ScoreKind.SIMILARITY,
        0.5,
        ScoreKind.SIMILARITY,
    )
    kept = RetrievedDoc("alpha", 0.5, score_kind=ScoreKind.SIMILARITY)
    assert _retrieve_safe(Backend([kept]), "q")[0] is kept  # normalised already: the same object


@pytest.mark.parametrize("score", NON_FINITE, ids=["inf", "-inf", "nan"])
def test_to_dict_never_writes_a_non_finite_score(score: float) -> None:
    doc = RetrievedDoc("made by hand", score, score_kind=ScoreKind.SIMILARITY)  # not through _retrieve_safe
    out = json_safe(doc)
    assert out["score"] is None and out["score_kind"] == "unknown"
    assert json_safe(RetrievedDoc("fine", 0.5, score_kind=ScoreKind.DISTANCE))["score"] == 0.5


# ---------------------------------------------------------------------- formats read


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    ("output", "metadata"),
    [
        ([("alpha", 0.9, {"src": "a.txt"})], {"src": "a.txt"}),
        ([(0.9, "alpha", {"src": "a.txt"})], {"src": "a.txt"}),
        ([(Document("alpha", {"own": 1}), 0.9, {"src": "a.txt"})], {"own": 1, "src": "a.txt"}),
        ([(0.9, Document("alpha", {"own": 1}), {"own": 2})], {"own": 2}),  # the tuple's wins
        ([("alpha", 0.9, None)], {}),
    ],
)
async def test_three_tuples_are_read_with_their_metadata(
    mode: str, output: Any, metadata: dict[str, Any]
) -> None:
    (doc,) = await retrieve(mode, output)
    assert (doc.text, doc.score, doc.metadata) == ("alpha", 0.9, metadata)
    assert doc.score_kind is ScoreKind.SIMILARITY


async def test_three_tuple_metadata_does_not_change_the_backends_own_objects() -> None:
    own = RetrievedDoc("alpha", 0.9, {"own": 1})
    (doc,) = _retrieve_safe(Backend([(own, 0.9, {"src": "x"})]), "q")
    assert doc.metadata == {"own": 1, "src": "x"} and own.metadata == {"own": 1}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    "output",
    [
        [b"alpha", bytearray(b"beta")],
        [(b"alpha", 0.9), (0.5, b"beta")],
        [{"text": b"alpha"}, {"content": "beta"}],
        {"documents": [b"alpha", "beta"]},
    ],
)
async def test_bytes_are_read_as_utf8(mode: str, output: Any) -> None:
    docs = await retrieve(mode, output)
    assert texts(docs) == ["alpha", "beta"] and docs.unreadable == ()


async def test_utf8_text_in_bytes_is_decoded_whole() -> None:
    (doc,) = _retrieve_safe(Backend(["القاهرة عاصمة مصر".encode()]), "q")
    assert doc.text == "القاهرة عاصمة مصر"


# ---------------------------------------------------------------------- unreadable output


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    ("output", "described"),
    [
        ([b"\xff\xfe", b"\x80abc"], "2 x bytes (not UTF-8)"),
        ([("alpha", 0.9, {"k": 1}, "extra")], "tuple of 4"),
        ([("alpha", 0.9, "not a dict")], "tuple of 3"),
        ([{"title": "T", "url": "u"}], "dict without a text field (keys: title, url)"),
        ({"matches": [{"id": 1}], "namespace": ""}, "dict without a text field (keys: matches, namespace)"),
        ([None, 42], "None, int without text"),
        (["", "  \n"], "2 x str with empty text"),
        ([["alpha", 0.9]], "list of 2"),
        ([NodeWithScore(SimpleNamespace(image=b"..."), 0.9)], "NodeWithScore without text"),
        (42, "int without text"),
        (b"\xff", "bytes (not UTF-8)"),
    ],
)
async def test_output_of_which_nothing_is_readable_raises_naming_it(
    mode: str, output: Any, described: str
) -> None:
    with pytest.raises(RetrievalError) as info:
        await retrieve(mode, output)
    message = str(info.value)
    assert "none readable" in message and described in message, message
    assert "Backend returned" in message and "return (text, score) pairs" in message
    assert info.value.query == "q" and info.value.retryable is False


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("output", [[], None, {}, {"results": []}, ()])
async def test_an_empty_result_is_still_empty_without_error(mode: str, output: Any) -> None:
    docs = await retrieve(mode, output)
    assert docs == [] and isinstance(docs, Retrieved) and docs.unreadable == ()


@pytest.mark.parametrize("mode", list(MODES))
async def test_partly_unreadable_output_returns_the_readable_and_describes_the_rest(mode: str) -> None:
    output = [b"\xff", "alpha", ("a", 1, 2, 3), None, {"title": "T"}, None, "beta", ""]
    docs = await retrieve(mode, output)
    assert texts(docs) == ["alpha", "beta"] and isinstance(docs, list)
    assert docs.unreadable == (
        "bytes (not UTF-8)",
        "tuple of 4",
        "2 x None",
        "dict without a text field (keys: title)",
        "str with empty text",
    )


async def test_everything_read_leaves_unreadable_empty() -> None:
    docs = await _aretrieve_safe(AsyncBackend([("alpha", 0.5), RetrievedDoc("beta")]), "q")
    assert texts(docs) == ["alpha", "beta"] and docs.unreadable == ()


def test_many_kinds_of_unreadable_items_are_summarised() -> None:
    output = ["alpha", None, 1, 2.5, b"\xff", (1, 2, 3, 4), [1], {"x": 1}, object(), None]
    docs = _retrieve_safe(Backend(output), "q")
    assert texts(docs) == ["alpha"]
    assert docs.unreadable == (
        "2 x None",
        "int without text",
        "float without text",
        "bytes (not UTF-8)",
        "tuple of 4",
        "3 more of other kinds",
    )


def test_normalize_results_appends_one_description_per_unreadable_item() -> None:
    seen: list[str] = []
    docs = normalize_results([None, "alpha", None, b"\x80"], unreadable=seen)
    assert texts(docs) == ["alpha"] and seen == ["None", "None", "bytes (not UTF-8)"]
    seen.clear()
    assert texts(normalize_results([RetrievedDoc("a"), RetrievedDoc(" ")], unreadable=seen)) == ["a"]
    assert seen == ["RetrievedDoc with empty text"]
    assert texts(normalize_results([None, "alpha"])) == ["alpha"]  # without the list: as before


def test_a_batch_names_the_query_whose_output_is_unreadable() -> None:
    class Mixed(Backend):
        def retrieve_many(self, queries: list[str], top_k: int) -> Any:
            return [["fine"], [b"\xff"]]

    backend = Mixed(None)  # (the resolution holds it weakly)
    with pytest.raises(RetrievalError, match=r"for query 'second'.*bytes") as info:
        resolve_backend(backend).retrieve_many(["first", "second"], 5)
    assert info.value.query == "second"


# ---------------------------------------------------------------------- duplicates

A = "Document A: the SLA guarantees 99.9 percent uptime every month, measured over the calendar month."
B = "Document B: support tickets are answered within four business hours."

DUPLICATED: dict[str, Any] = {
    "strings": [A] * 5 + [B],
    "pairs": [(A, 0.9)] * 5 + [(B, 0.5)],
    "RetrievedDoc": [RetrievedDoc(A, 0.9, score_kind=ScoreKind.SIMILARITY)] * 5 + [RetrievedDoc(B, 0.5)],
    "copies differing after 120 chars": [A + "x" * 100 + str(i) for i in range(5)] + [B],
    "dicts": [{"text": A, "id": str(i)} for i in range(5)] + [{"text": B, "id": "b"}],
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("fmt", list(DUPLICATED))
async def test_copies_are_merged_before_top_k(mode: str, fmt: str) -> None:
    docs = await retrieve(mode, DUPLICATED[fmt], top_k=5)
    assert [d.text[:11] for d in docs] == ["Document A:", "Document B:"]


@pytest.mark.parametrize("mode", list(MODES))
async def test_merging_keeps_the_best_copy_in_the_first_place_and_asks_once(mode: str) -> None:
    output = [(A, 0.2), ("C", 0.8), (A, 0.9), (B, 0.1), (A, 0.3)]
    backend = MODES[mode](output)
    docs = await retrieve_from(mode, backend, top_k=3)
    assert [(d.text[:1], d.score) for d in docs] == [("D", 0.9), ("C", 0.8), ("D", 0.1)]
    assert texts(docs)[2] == B and backend.calls == [("q", 3)]  # asked once, for top_k


# ---------------------------------------------------------------------- end to end

QUESTION = "What uptime does the SLA guarantee?"
ANSWER = "The SLA guarantees 99.9 percent uptime."
PASSAGE = "The service level agreement guarantees an uptime of 99.9 percent for every month of service."


def strategy_llm() -> FakeLLM:
    """One scripted LLM for every strategy: judge, passage writer, claim checker, answerer."""

    def reply(prompt: str) -> str:
        if "factual claims" in prompt:
            return json.dumps({"claims": [{"claim": ANSWER, "supported": True}]})
        if "Write a passage" in prompt:
            return PASSAGE
        if "judge your own answer" in prompt:
            return judged(ANSWER, 9)
        return ANSWER

    return FakeLLM(reply)


def make(name: str, backends: list[Any]) -> Any:
    llm = strategy_llm()
    if name == "SelfHealingRAG":
        return SelfHealingRAG(llm, backends)
    strategy = {"SelfIRAG": SelfIRAG, "HyDERAG": HyDERAG, "RecursiveRAG": RecursiveRAG}[name]
    return strategy(backends[0], llm)


async def ask(name: str, backends: list[Any], mode: str) -> Any:
    rag = make(name, backends)
    if name == "SelfHealingRAG":
        return rag.ask_with_report_sync(QUESTION) if mode == "sync" else await rag.ask_with_report(QUESTION)
    return rag.query(QUESTION) if mode == "sync" else await rag.aquery(QUESTION)


STRATEGIES = ["SelfIRAG", "HyDERAG", "RecursiveRAG", "SelfHealingRAG"]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("backend_type", [Backend, ManyBackend])
async def test_every_strategy_keeps_the_second_document_behind_five_copies(
    name: str, mode: str, backend_type: type[Backend]
) -> None:
    result = await ask(name, [backend_type([A] * 5 + [B])], mode)
    sources = {d.text for d in result.sources}
    assert sources == {A, B}, name


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", ["SelfIRAG", "HyDERAG", "RecursiveRAG"])
async def test_unreadable_output_is_a_failed_retrieval_in_the_trace(name: str, mode: str) -> None:
    result = await ask(name, [Backend([b"\xff\xfe", b"\x80"])], mode)
    notes = [e for e in result.trace.events if e.name == "retrieval_failed"]
    assert notes and all("2 x bytes (not UTF-8)" in (e.error or "") for e in notes)
    assert result.sources == []
    failed = [e for e in result.trace.events if e.kind == "retrieval" and e.error]
    assert failed and "none readable" in (failed[0].error or "")


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_self_healing_moves_on_from_a_backend_with_unreadable_output(mode: str) -> None:
    report = await ask("SelfHealingRAG", [Backend([b"\xff\xfe"]), Backend([A])], mode)
    first = report.attempt_details[0]
    assert "none readable: bytes (not UTF-8)" in (first.error or "")
    notes = [e for e in report.trace.events if e.name == "attempt_failed"]
    assert notes and "none readable" in (notes[0].error or "")
    assert report.attempts == 2 and [d.text for d in report.sources] == [A]
