"""_retrieve_safe: every backend output format, sync and async, errors, dedupe."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from selfrag_core import (
    ConfigurationError,
    RetrievalError,
    RetrievedDoc,
    ScoreKind,
    _aretrieve_safe,
    _deduplicate,
    _retrieve_safe,
)
from selfrag_core.retrieval import ignored_options, normalize_results


class Backend:
    def __init__(self, output: Any) -> None:
        self.output = output
        self.calls: list[tuple[str, int]] = []

    def retrieve(self, query: str, top_k: int) -> Any:
        self.calls.append((query, top_k))
        return self.output


@dataclass
class Chunk:  # like Fennec's DocumentChunk
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


class Document:  # shaped like langchain_core.documents.Document
    def __init__(
        self, page_content: str, metadata: dict[str, Any] | None = None, id: str | None = None
    ) -> None:
        self.page_content = page_content
        self.metadata = metadata or {}
        self.id = id


class TextNode:  # shaped like a LlamaIndex node
    def __init__(self, text: str, node_id: str) -> None:
        self._text, self.node_id, self.metadata = text, node_id, {"file": "a.txt"}

    def get_content(self) -> str:
        return self._text


class NodeWithScore:
    def __init__(self, node: Any, score: float | None) -> None:
        self.node, self.score = node, score


class HaystackDoc:
    def __init__(self, content: str, meta: dict[str, Any], score: float) -> None:
        self.content, self.meta, self.score, self.id = content, meta, score, "h1"


def texts(docs: list[RetrievedDoc]) -> list[str]:
    return [d.text for d in docs]


@pytest.mark.parametrize(
    "output",
    [
        [(Chunk("alpha", {"s": 1}), 0.9), (Chunk("beta"), 0.5)],
        [("alpha", 0.9), ("beta", 0.5)],
        [(0.9, "alpha"), (0.5, "beta")],
        [{"text": "alpha", "score": 0.9}, {"content": "beta", "score": 0.5}],
        [{"page_content": "alpha", "score": 0.9}, {"text": "beta"}],
        {"results": [{"text": "alpha", "score": 0.9}, {"text": "beta", "score": 0.5}]},
        {"documents": ["alpha", "beta"]},
        ["alpha", "beta"],
        [Document("alpha", {"k": "v"}, id="d1"), Document("beta")],
        [(Document("alpha"), 0.9), (Document("beta"), 0.5)],
        [NodeWithScore(TextNode("alpha", "n1"), 0.9), NodeWithScore(TextNode("beta", "n2"), None)],
        [HaystackDoc("alpha", {"src": "x"}, 0.9), HaystackDoc("beta", {}, 0.5)],
        [SimpleNamespace(content="alpha"), SimpleNamespace(text="beta")],
    ],
)
def test_formats(output: Any) -> None:
    docs = _retrieve_safe(Backend(output), "q", 5)
    assert texts(docs) == ["alpha", "beta"]
    assert all(isinstance(d, RetrievedDoc) for d in docs)


def test_fields_are_kept() -> None:
    (doc,) = _retrieve_safe(Backend([{"text": "t", "score": 0.3, "id": 7, "metadata": {"a": 1}}]), "q", 5)
    assert (doc.score, doc.id, doc.metadata) == (0.3, "7", {"a": 1})
    (node,) = _retrieve_safe(Backend([NodeWithScore(TextNode("x", "n1"), None)]), "q", 5)
    assert (node.id, node.score, node.score_kind, node.metadata) == (
        "n1",
        None,
        ScoreKind.UNKNOWN,
        {"file": "a.txt"},
    )
    (hay,) = _retrieve_safe(Backend([HaystackDoc("c", {"src": "x"}, 0.4)]), "q", 5)
    assert hay.metadata == {"src": "x"} and hay.score == 0.4


def test_a_document_is_named_by_its_source_else_its_id() -> None:
    assert RetrievedDoc("t", metadata={"source": "a.md"}, id="7").source == "a.md"
    assert RetrievedDoc("t", metadata={"source": ""}, id="7").source == "7"
    assert RetrievedDoc("t", metadata={"source": 3}).source == "3"
    assert RetrievedDoc("t").source is None


def test_score_kinds() -> None:
    (d,) = _retrieve_safe(Backend([{"text": "t", "distance": 0.2}]), "q", 5)
    assert d.score_kind is ScoreKind.DISTANCE and d.similarity == -0.2
    (d,) = _retrieve_safe(Backend([("t", 0.2)]), "q", 5)
    assert d.score_kind is ScoreKind.UNKNOWN and d.similarity is None
    declared = Backend([("t", 0.2)])
    declared.score_kind = "distance"  # type: ignore[attr-defined]
    (d,) = _retrieve_safe(declared, "q", 5)
    assert d.score_kind is ScoreKind.DISTANCE
    (n,) = _retrieve_safe(Backend([NodeWithScore(TextNode("x", "n"), 0.7)]), "q", 5)
    assert n.score_kind is ScoreKind.SIMILARITY


def test_skips_unreadable_items_and_truncates() -> None:
    out = [None, {"image": b"..."}, "", "a", "b", "c"]
    assert texts(_retrieve_safe(Backend(out), "q", 2)) == ["a", "b"]
    assert _retrieve_safe(Backend(None), "q", 5) == []


def test_top_k_passed() -> None:
    backend = Backend(["a"])
    _retrieve_safe(backend, "query", 7)
    assert backend.calls == [("query", 7)]


def test_backend_that_raises_becomes_retrieval_error() -> None:
    class Broken:
        def retrieve(self, query: str, top_k: int) -> Any:
            raise ConnectionError("index offline")

    with pytest.raises(RetrievalError, match="index offline") as info:
        _retrieve_safe(Broken(), "q", 5)
    assert isinstance(info.value.__cause__, ConnectionError) and info.value.query == "q"


def test_not_a_backend() -> None:
    with pytest.raises(ConfigurationError, match="not a retrieval backend"):
        _retrieve_safe(object(), "q", 5)


async def test_async_backends() -> None:
    class AsyncRetrieve:
        async def retrieve(self, query: str, top_k: int) -> Any:
            return [("async", 1.0)]

    class Both:
        def retrieve(self, query: str, top_k: int) -> Any:
            return ["sync"]

        async def aretrieve(self, query: str, top_k: int) -> Any:
            return ["native async"]

    assert texts(await _aretrieve_safe(AsyncRetrieve(), "q", 5)) == ["async"]
    assert texts(await _aretrieve_safe(Both(), "q", 5)) == ["native async"]
    assert texts(_retrieve_safe(Both(), "q", 5)) == ["sync"]
    assert texts(_retrieve_safe(AsyncRetrieve(), "q", 5)) == ["async"]  # async backend from sync code
    assert texts(await _aretrieve_safe(Backend(["plain"]), "q", 5)) == ["plain"]


def test_an_object_with_an_async_call_is_awaited_from_sync_code_too() -> None:
    class AsyncCallable:
        async def __call__(self, query: str, top_k: int = 5) -> Any:
            return [f"found {query} ({top_k})"]

    assert texts(_retrieve_safe(AsyncCallable(), "q", 3)) == ["found q (3)"]


def test_extra_options_only_where_accepted() -> None:
    seen: dict[str, Any] = {}

    class WithFilter:
        def retrieve(self, query: str, top_k: int = 5, metadata_filter: dict | None = None) -> Any:
            seen["filter"] = metadata_filter
            return ["x"]

    assert texts(_retrieve_safe(WithFilter(), "q", 3, metadata_filter={"a": 1})) == ["x"]
    assert seen["filter"] == {"a": 1}
    assert texts(_retrieve_safe(Backend(["y"]), "q", 3, metadata_filter={"a": 1})) == ["y"]


def test_ignored_options_are_those_the_called_function_does_not_take() -> None:
    class Both:  # sync retrieve takes the filter, async aretrieve (used from async code) does not
        def retrieve(self, query: str, top_k: int, metadata_filter: Any = None) -> Any:
            return ["x"]

        async def aretrieve(self, query: str, top_k: int) -> Any:
            return ["x"]

    class Anything:
        def retrieve(self, query: str, top_k: int, **options: Any) -> Any:
            return ["x"]

    class Many:
        def retrieve(self, query: str, top_k: int, metadata_filter: Any = None) -> Any:
            return ["x"]

        def retrieve_many(self, queries: list[str], top_k: int) -> Any:
            return [["x"] for _ in queries]

    wanted = {"metadata_filter": {"a": 1}, "filters": None}  # (None is not an option set)
    assert ignored_options(Backend([]), wanted, use_async=False) == ["metadata_filter"]
    assert ignored_options(Backend([]), wanted, use_async=True) == ["metadata_filter"]
    assert ignored_options(Both(), wanted, use_async=False) == []
    assert ignored_options(Both(), wanted, use_async=True) == ["metadata_filter"]
    assert ignored_options(Anything(), wanted, use_async=True) == []
    assert ignored_options(Many(), wanted, use_async=False) == []
    assert ignored_options(Many(), wanted, use_async=False, many=True) == ["metadata_filter"]
    assert ignored_options(Backend([]), {"metadata_filter": None}, use_async=False) == []


def test_deduplicate_keeps_best_comparable_score_and_order() -> None:
    long = "x" * 120
    docs = [
        RetrievedDoc(long + " first tail", 0.2, score_kind=ScoreKind.SIMILARITY, id="a"),
        RetrievedDoc("other", 0.5, score_kind=ScoreKind.SIMILARITY),
        RetrievedDoc(long + " second tail", 0.9, score_kind=ScoreKind.SIMILARITY, id="b"),
    ]
    out = _deduplicate(docs)
    assert [d.id for d in out] == ["b", None]  # same first 120 chars -> one, best score, first position


def test_deduplicate_never_compares_different_kinds() -> None:
    a = RetrievedDoc("same", 0.1, score_kind=ScoreKind.DISTANCE, id="dist")
    b = RetrievedDoc("same", 5.0, score_kind=ScoreKind.UNKNOWN, id="unk")
    assert [d.id for d in _deduplicate([a, b])] == ["dist"]
    c = RetrievedDoc("same", 0.05, score_kind=ScoreKind.DISTANCE, id="closer")
    assert [d.id for d in _deduplicate([a, c])] == ["closer"]  # smaller distance wins


def test_documents_normalised_already_come_back_as_they_are_without_the_empty_ones() -> None:
    kept = RetrievedDoc("Paris is in France.", 0.8, {"k": 1}, "p", ScoreKind.SIMILARITY)
    other = RetrievedDoc("Lyon", None)
    found = normalize_results([kept, RetrievedDoc("  \n"), other, RetrievedDoc("")])
    assert found == [kept, other] and found[0] is kept
    mixed = normalize_results([kept, ("Nice", 0.5)], score_kind=ScoreKind.SIMILARITY)
    assert mixed == [kept, RetrievedDoc("Nice", 0.5, {}, None, ScoreKind.SIMILARITY)]
