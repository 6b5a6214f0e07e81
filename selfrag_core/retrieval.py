"""Retrieval from any backend, normalised to :class:`RetrievedDoc`.

``_retrieve_safe`` is the single place where backend output formats are understood:

* ``[(obj, score)]`` where obj is a string or has ``.text`` / ``.content`` /
  ``.page_content`` / ``get_content()``; ``[(score, text)]`` too;
* ``[dict]`` with ``text`` / ``content`` / ``page_content``, ``score``, ``id``,
  ``metadata`` (or Haystack's ``meta``); ``{"results": [...]}``, ``{"documents": [...]}``;
* ``(text_or_obj, score, metadata)`` and ``(score, text, metadata)``: the metadata dict
  is merged over the object's own;
* plain strings, and bytes (decoded as UTF-8); LangChain ``Document`` and
  ``(Document, score)``; LlamaIndex ``NodeWithScore`` (score may be None); Haystack
  ``Document`` (``content``, ``meta``, ``score``); ``RetrievedDoc`` itself.

Nothing is dropped silently. A score that is not a finite number (``NaN``, ``inf``)
is no score (None, kind unknown), whatever the format. An item that cannot be read
(no text, bytes that are not UTF-8, a tuple of another shape, empty text) is left out
and described in the result's ``unreadable`` (a :class:`Retrieved`, a list); when the
backend returned items and none could be read, the retrieval raises
:class:`RetrievalError` saying what came back, rather than look like an empty index.
Copies of a document (same first 120 characters, see :func:`_deduplicate`) are merged
before the ``top_k`` best are taken, so duplicates never crowd out other documents.

Backends are called with ``retrieve(query, top_k)`` (sync or async, ``aretrieve``
preferred from async code). LangChain retrievers (``invoke``), LangChain vector
stores and LlamaIndex retrievers (whose ``retrieve`` takes no ``top_k``) are
recognised without importing either framework.

Score kinds: a score is a similarity (higher is better), a distance (lower is
better) or unknown. LangChain relevance scores and LlamaIndex scores are
similarities; a backend can declare the kind of its scores with a ``score_kind``
attribute ("similarity" or "distance"), and a dict item with ``distance`` (rather
than ``score``) is a distance. Anything else is unknown, and the strategies then
fuse rankings by rank, never by raw score.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from selfrag_core.errors import ConfigurationError, RetrievalError, misconfiguration_hint, misconfigured
from selfrag_core.llm import _from_package, _mro_names, is_coroutine_callable, run_coroutine_sync
from selfrag_core.types import RetrievedDoc, ScoreKind
from selfrag_core.workers import to_thread

_TEXT_KEYS = ("text", "content", "page_content", "document", "chunk", "passage")


# ------------------------------------------------------------------ normalisation


_KINDS = {kind.value: kind for kind in ScoreKind}


def _kind_of(value: Any) -> ScoreKind:
    return value if isinstance(value, ScoreKind) else _KINDS.get(str(value).lower(), ScoreKind.UNKNOWN)


def _number(value: Any) -> float | None:
    """``value`` as a float (NaN and infinities included), or None if it is none."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _as_score(value: Any) -> float | None:
    """A score as a finite float; anything else (None, NaN, inf, not a number) is None."""
    score = _number(value)
    return score if score is not None and math.isfinite(score) else None


def _checked(doc: RetrievedDoc) -> RetrievedDoc:
    """``doc`` itself, or a copy without a score if its score is not a finite number."""
    if doc.score is None or _as_score(doc.score) is not None:
        return doc
    return replace(doc, score=None, score_kind=ScoreKind.UNKNOWN)


def _text_of(obj: Any) -> str | None:
    if isinstance(obj, str):
        return obj
    if isinstance(obj, (bytes, bytearray)):
        try:
            return bytes(obj).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(obj, dict):
        values = (obj.get(key) for key in _TEXT_KEYS)
        texts = (_text_of(value) for value in values if isinstance(value, (str, bytes, bytearray)))
        return next((text for text in texts if text is not None), None)
    get_content = getattr(obj, "get_content", None)
    if callable(get_content):  # LlamaIndex nodes
        try:
            content = get_content()
        except Exception:
            content = None
        return content if isinstance(content, str) else None
    values = (getattr(obj, attr, None) for attr in ("page_content", "content", "text"))
    return next((value for value in values if isinstance(value, str)), None)


def _metadata_of(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        meta = obj.get("metadata", obj.get("meta"))
    else:
        meta = getattr(obj, "metadata", None)
        if not isinstance(meta, dict):
            meta = getattr(obj, "meta", None)
    return dict(meta) if isinstance(meta, dict) else {}


def _id_of(obj: Any, meta: dict[str, Any]) -> str | None:
    if isinstance(obj, dict):
        value = obj.get("id", obj.get("doc_id", obj.get("_id")))
    else:
        value = getattr(obj, "id", None) or getattr(obj, "node_id", None) or getattr(obj, "id_", None)
    if value is None:
        value = meta.get("id") or meta.get("doc_id")
    return None if value is None else str(value)


def _doc_from(obj: Any, score: Any, default_kind: ScoreKind) -> RetrievedDoc | None:
    if isinstance(obj, RetrievedDoc):
        return _checked(obj)
    if type(obj).__name__ == "NodeWithScore" and hasattr(obj, "node"):
        node = obj.node
        text = _text_of(node)
        if text is None:
            return None
        meta = _metadata_of(node)
        node_score = _as_score(getattr(obj, "score", None))
        node_id = getattr(node, "node_id", None)  # before _id_of's "id", a miss pydantic makes slow
        return RetrievedDoc(
            text, node_score, meta, str(node_id) if node_id else _id_of(node, meta),
            ScoreKind.SIMILARITY if node_score is not None else ScoreKind.UNKNOWN,
        )  # fmt: skip
    text = _text_of(obj)
    if text is None:
        return None
    meta = _metadata_of(obj)
    kind = default_kind
    if isinstance(obj, dict):
        if score is None and "distance" in obj:
            score, kind = obj["distance"], ScoreKind.DISTANCE
        elif score is None and "similarity" in obj:
            score, kind = obj["similarity"], ScoreKind.SIMILARITY
        elif score is None:
            score = obj.get("score", obj.get("relevance_score"))
        if "score_kind" in obj:
            kind = _kind_of(obj["score_kind"])
    elif score is None:
        score = getattr(obj, "score", None)
    value = _as_score(score)
    return RetrievedDoc(
        text, value, meta, _id_of(obj, meta), kind if value is not None else ScoreKind.UNKNOWN
    )


def _items_of(raw: Any) -> Iterable[Any]:
    if raw is None:
        return []
    if isinstance(raw, dict):
        for key in ("results", "documents", "docs", "hits", "nodes", "source_nodes"):
            if key in raw:
                return _items_of(raw[key])
        return [raw] if raw else []  # one document, or an unreadable item to report
    if isinstance(raw, (str, bytes, bytearray)):
        return [raw]
    for attr in ("source_nodes", "documents"):  # response-like objects
        if not isinstance(raw, (list, tuple)) and isinstance(getattr(raw, attr, None), list):
            return list(getattr(raw, attr))
    try:
        return list(raw)
    except TypeError:
        return [raw]


def _why(obj: Any) -> str:
    """Why ``obj`` gives no text, in a few words (for ``unreadable`` and error messages)."""
    if obj is None:
        return "None"
    if isinstance(obj, (bytes, bytearray)):
        return f"{type(obj).__name__} (not UTF-8)"
    if isinstance(obj, dict):
        keys = [str(k) for k in obj]
        listed = ", ".join(keys[:6]) + (", ..." if len(keys) > 6 else "")
        return f"dict without a text field (keys: {listed})"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} of {len(obj)}"
    return f"{type(obj).__name__} without text"


def _read(item: Any, kind: ScoreKind) -> RetrievedDoc | str:
    """One item of a backend's output as a document, or why it cannot be read."""
    obj, score, extra = item, None, None
    if isinstance(item, tuple):
        if len(item) == 3 and (item[2] is None or isinstance(item[2], Mapping)):
            extra = item[2]  # (text, score, metadata) or (score, text, metadata)
        elif len(item) != 2:
            return _why(item)
        first, second = item[0], item[1]
        if (
            not isinstance(first, (str, bytes, bytearray))
            and _number(first) is not None
            and _text_of(second) is not None
        ):
            obj, score = second, first  # (score, text): a NaN or infinite score is still a score
        else:
            obj, score = first, second
    doc = _doc_from(obj, score, kind)
    if doc is None:
        return _why(obj)
    if not doc.text.strip():
        return f"{type(obj).__name__} with empty text"
    return replace(doc, metadata={**doc.metadata, **extra}) if extra else doc


def normalize_results(
    raw: Any, *, score_kind: ScoreKind = ScoreKind.UNKNOWN, unreadable: list[str] | None = None
) -> list[RetrievedDoc]:
    """Turn any supported backend output into a list of ``RetrievedDoc``.

    Items that cannot be read (no text, empty text, undecodable bytes, tuples of
    another shape) are left out; ``unreadable``, when given, gets one short
    description of each appended.
    """
    if type(raw) is list and all(type(item) is RetrievedDoc for item in raw):  # normalised already
        docs = [
            doc
            if doc.score is None or (type(doc.score) is float and math.isfinite(doc.score))
            else _checked(doc)
            for doc in raw
            if doc.text.strip()
        ]
        if unreadable is not None and len(docs) < len(raw):
            unreadable.extend(["RetrievedDoc with empty text"] * (len(raw) - len(docs)))
        return docs
    docs = []
    for item in _items_of(raw):
        read = _read(item, score_kind)
        if isinstance(read, RetrievedDoc):
            docs.append(read)
        elif unreadable is not None:
            unreadable.append(read)
    return docs


class Retrieved(list[RetrievedDoc]):
    """The documents of one retrieval, best first: a list, with ``unreadable``, a short
    description of the items of the backend's output that could not be read (empty
    when everything was read; repeated descriptions counted, at most
    ``_MAX_DESCRIBED`` kinds named)."""

    unreadable: tuple[str, ...] = ()

    def __init__(self, docs: Iterable[RetrievedDoc] = (), unreadable: Iterable[str] = ()) -> None:
        super().__init__(docs)
        self.unreadable = tuple(unreadable)


_MAX_DESCRIBED = 5


def _summary(descriptions: list[str]) -> list[str]:
    """``descriptions`` with repeats counted ("3 x bytes (not UTF-8)"), at most
    ``_MAX_DESCRIBED`` kinds and a count of the rest."""
    counts = Counter(descriptions)  # (in order of first appearance)
    named = [f"{n} x {what}" if n > 1 else what for what, n in counts.items()]
    if len(named) <= _MAX_DESCRIBED:
        return named
    rest = sum(list(counts.values())[_MAX_DESCRIBED:])
    return [*named[:_MAX_DESCRIBED], f"{rest} more of other kinds"]


def _collect(backend: Any, query: str, raw: Any, kind: ScoreKind, top_k: int) -> Retrieved:
    """Normalise one query's ``raw`` output: copies merged, then the ``top_k`` best.
    Raises :class:`RetrievalError` when items came back and none could be read."""
    skipped: list[str] = []
    docs = normalize_results(raw, score_kind=kind, unreadable=skipped)
    if skipped and not docs:
        n = len(skipped)
        error = RetrievalError(
            f"{type(backend).__name__} returned {n} item{'s' if n > 1 else ''} for query "
            f"{query[:80]!r}, none readable: {', '.join(_summary(skipped))}; return (text, score) "
            "pairs, dicts with 'text', or strings",
            query=query,
        )
        error.retryable = False  # the same call gives the same output
        raise error
    return Retrieved(_deduplicate(docs)[:top_k], _summary(skipped))


# ------------------------------------------------------------------ backend calls


def _signature_names(fn: Any) -> frozenset[str] | None:
    """Parameter names of ``fn`` ("**" standing for **kwargs), or None if unknown."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    return frozenset("**" if p.kind is p.VAR_KEYWORD else name for name, p in params.items())


_cached_signature_names = functools.lru_cache(maxsize=512)(_signature_names)


def _parameters(fn: Any) -> frozenset[str] | None:
    """Like ``_signature_names``, memoised per underlying function (bounded)."""
    try:
        return _cached_signature_names(getattr(fn, "__func__", fn))
    except TypeError:  # unhashable callable
        return _signature_names(fn)


def _accepts(fn: Any, name: str) -> bool:
    names = _parameters(fn)
    return names is not None and (name in names or "**" in names)


def _declared_kind(backend: Any) -> ScoreKind:
    return _kind_of(getattr(backend, "score_kind", ScoreKind.UNKNOWN))


def _is_lc_vectorstore(backend: Any) -> bool:
    return "VectorStore" in _mro_names(backend) and hasattr(backend, "similarity_search_with_score")


def _is_lc_retriever(backend: Any) -> bool:
    return "BaseRetriever" in _mro_names(backend) and hasattr(backend, "invoke")


def _is_li_retriever(backend: Any) -> bool:
    return _from_package(backend, "llama_index") and hasattr(backend, "retrieve")


def data_source_id(backend: Any) -> str:
    """What a retrieval searched (OpenTelemetry's ``gen_ai.data_source.id``): the backend's
    ``data_source_id``, ``collection_name`` or ``name`` (a Chroma or LangChain collection,
    say), the folder of a saved index (``path``; through a wrapper's ``rag``), else the
    backend's class name."""
    inner = getattr(backend, "rag", None)
    if inner is not None and inner is not backend:  # the embedded store's search of its RAG
        return data_source_id(inner)
    for attribute in ("data_source_id", "collection_name", "_collection_name", "name"):
        value = getattr(backend, attribute, None)
        if isinstance(value, str) and value:
            return value
    path = getattr(backend, "path", None)
    if isinstance(path, (str, os.PathLike)) and os.path.basename(os.fspath(path)):
        return os.path.basename(os.fspath(path))
    return type(backend).__name__


def _kwargs_for(fn: Any, top_k: int, extra: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in extra.items() if v is not None and _accepts(fn, k)}
    if _accepts(fn, "top_k"):
        kwargs["top_k"] = top_k
    return kwargs


def ignored_options(
    backend: Any, options: Mapping[str, Any], *, use_async: bool, many: bool = False
) -> list[str]:
    """The names of the ``options`` set (not None) that a retrieval from ``backend`` does
    not pass on, because the function it calls does not take them: LangChain and
    LlamaIndex objects take none; other backends what their ``retrieve`` (``aretrieve``,
    ``retrieve_many``, ...) names or takes as ``**kwargs``. ``many``: a batched
    retrieval (:func:`_retrieve_many_safe`)."""
    names = [k for k, v in options.items() if v is not None]
    if not names:
        return []
    fn = _options_target(backend, use_async, many)
    return names if fn is None else [k for k in names if not _accepts(fn, k)]


def _options_target(backend: Any, use_async: bool, many: bool) -> Any:
    """The function a retrieval gives its options to (None: it gives none)."""
    if many:
        return _many_target(backend, use_async)[0]
    if _is_lc_vectorstore(backend) or _is_lc_retriever(backend) or _is_li_retriever(backend):
        return None
    return (use_async and _async_target(backend)) or _sync_target(backend)


def _sync_target(backend: Any) -> Any:
    """What a sync retrieval calls on a backend that is not a LangChain or LlamaIndex
    object: its ``retrieve``, else the backend itself when it is callable."""
    fn = getattr(backend, "retrieve", None)
    if fn is not None:
        return fn
    if callable(backend):
        return backend
    raise TypeError(f"{type(backend).__name__} is not a retrieval backend: it needs retrieve(query, top_k)")


def _async_target(backend: Any) -> Any:
    """What an async retrieval awaits on such a backend: an async ``aretrieve`` or
    ``retrieve``, else the backend itself when calling it gives a coroutine; None when
    there is none (the sync call then runs in a worker thread)."""
    for name in ("aretrieve", "retrieve"):
        fn = getattr(backend, name, None)
        if fn is not None and inspect.iscoroutinefunction(fn):
            return fn
    return backend if is_coroutine_callable(backend) else None


def _many_target(backend: Any, use_async: bool) -> tuple[Any, bool]:
    """The batch function a batched retrieval calls, and whether it is awaited there:
    sync code prefers ``retrieve_many``, async code an async ``aretrieve_many``."""
    if use_async:
        fn = getattr(backend, "aretrieve_many", None)
        if fn is not None and inspect.iscoroutinefunction(fn):
            return fn, True
        return getattr(backend, "retrieve_many", None), False
    fn = getattr(backend, "retrieve_many", None)
    if callable(fn):
        return fn, False
    return getattr(backend, "aretrieve_many", None), True


def _invoke(fn: Any, first: Any, top_k: int, extra: dict[str, Any]) -> Any:
    """``fn(first, top_k=top_k, **extra)`` with only the options ``fn`` accepts; ``top_k``
    goes second by position to a ``fn`` that does not name it."""
    kwargs = _kwargs_for(fn, top_k, extra)
    return fn(first, **kwargs) if "top_k" in kwargs else fn(first, top_k, **kwargs)


def store_search(
    store: Any, query: str, k: int, *, relevance: bool = True, **kwargs: Any
) -> tuple[Any, ScoreKind | None]:
    """Search a LangChain ``VectorStore`` with the best scores it offers: relevance
    scores (similarities; unless ``relevance=False``), else its raw scores (kind None:
    the store's own, for the caller to say), else unscored documents (a store with only
    ``similarity_search``). Returns the results and their score kind."""
    if relevance:
        try:
            return store.similarity_search_with_relevance_scores(query, k=k, **kwargs), ScoreKind.SIMILARITY
        except NotImplementedError:
            pass
    try:
        return store.similarity_search_with_score(query, k=k, **kwargs), None
    except NotImplementedError:
        return store.similarity_search(query, k=k, **kwargs), ScoreKind.UNKNOWN


async def astore_search(
    store: Any, query: str, k: int, *, relevance: bool = True, **kwargs: Any
) -> tuple[Any, ScoreKind | None]:
    """Async :func:`store_search`."""
    if relevance:
        try:
            found = await store.asimilarity_search_with_relevance_scores(query, k=k, **kwargs)
            return found, ScoreKind.SIMILARITY
        except NotImplementedError:
            pass
    try:
        return await store.asimilarity_search_with_score(query, k=k, **kwargs), None
    except NotImplementedError:
        return await store.asimilarity_search(query, k=k, **kwargs), ScoreKind.UNKNOWN


def _sync_call(backend: Any, query: str, top_k: int, extra: dict[str, Any]) -> tuple[Any, ScoreKind]:
    kind = _declared_kind(backend)
    if _is_lc_vectorstore(backend):
        found, found_kind = store_search(backend, query, top_k)
        return found, found_kind or kind
    if _is_lc_retriever(backend):
        return backend.invoke(query), kind  # (top_k is taken after copies are merged)
    if _is_li_retriever(backend):
        return backend.retrieve(query), kind
    fn = _sync_target(backend)
    if is_coroutine_callable(fn):  # (an async function, or an object with an async __call__)
        return run_coroutine_sync(lambda: _invoke(fn, query, top_k, extra)), kind
    return _invoke(fn, query, top_k, extra), kind


async def _async_call(backend: Any, query: str, top_k: int, extra: dict[str, Any]) -> tuple[Any, ScoreKind]:
    kind = _declared_kind(backend)
    if _is_lc_vectorstore(backend):
        found, found_kind = await astore_search(backend, query, top_k)
        return found, found_kind or kind
    if _is_lc_retriever(backend):
        return await backend.ainvoke(query), kind
    if _is_li_retriever(backend) and hasattr(backend, "aretrieve"):
        return await backend.aretrieve(query), kind
    fn = _async_target(backend)
    if fn is backend:
        return await backend(query, **_kwargs_for(backend, top_k, extra)), kind
    if fn is not None:
        return await _invoke(fn, query, top_k, extra), kind
    return await to_thread(_sync_call, backend, query, top_k, extra)


@contextlib.contextmanager
def _wrapped(backend: Any, query: str) -> Iterator[None]:
    """Raises the error of a failed retrieval: a :class:`ConfigurationError` for a
    programming or configuration error of the backend (no retry or fallback mends it),
    else a :class:`RetrievalError`."""
    try:
        yield
    except (RetrievalError, ConfigurationError):
        raise
    except Exception as e:
        hint = misconfiguration_hint(e)
        if hint is not None:
            raise misconfigured("backend", backend, e, hint) from e
        raise RetrievalError(
            f"retrieval from {type(backend).__name__} failed for query {query[:80]!r}: "
            f"{type(e).__name__}: {e}",
            query=query,
        ) from e


def _retrieve_safe(backend: Any, query: str, top_k: int = 5, **extra: Any) -> Retrieved:
    """Retrieve ``top_k`` documents for ``query`` from any backend, normalised, copies
    merged (a :class:`Retrieved`: a list, with the items it could not read described).

    ``extra`` keyword arguments (e.g. ``metadata_filter``) are passed only to
    backends whose ``retrieve`` accepts them. Raises :class:`RetrievalError` if the
    backend raises, or returns items of which none can be read.
    """
    with _wrapped(backend, query):
        raw, kind = _sync_call(backend, query, top_k, extra)
        return _collect(backend, query, raw, kind, top_k)


async def _aretrieve_safe(backend: Any, query: str, top_k: int = 5, **extra: Any) -> Retrieved:
    """Async :func:`_retrieve_safe`: uses the backend's async API where it has one."""
    with _wrapped(backend, query):
        raw, kind = await _async_call(backend, query, top_k, extra)
        return _collect(backend, query, raw, kind, top_k)


def supports_many(backend: Any) -> bool:
    """Whether ``backend`` answers several queries in one call, with
    ``retrieve_many(queries, top_k)`` and/or an async ``aretrieve_many`` returning one
    result list per query (the embedded store's ``RAG`` has both)."""
    return any(callable(getattr(backend, name, None)) for name in ("retrieve_many", "aretrieve_many"))


def _retrieve_many_safe(backend: Any, queries: list[str], top_k: int = 5, **extra: Any) -> list[Retrieved]:
    """:func:`_retrieve_safe` for each of ``queries``, in one call of the backend's
    ``retrieve_many`` (or ``aretrieve_many``): see :func:`supports_many`."""
    if not queries:
        return []
    with _wrapped(backend, _first_of(queries)):
        fn, awaited = _many_target(backend, use_async=False)
        if awaited:
            raw = run_coroutine_sync(lambda: _invoke(fn, queries, top_k, extra))
        else:
            raw = _invoke(fn, queries, top_k, extra)
        return _per_query(backend, queries, raw, top_k)


async def _aretrieve_many_safe(
    backend: Any, queries: list[str], top_k: int = 5, **extra: Any
) -> list[Retrieved]:
    """Async :func:`_retrieve_many_safe`: ``aretrieve_many`` where the backend has it,
    else ``retrieve_many`` in a worker thread."""
    if not queries:
        return []
    with _wrapped(backend, _first_of(queries)):
        fn, awaited = _many_target(backend, use_async=True)
        if awaited:
            raw = await _invoke(fn, queries, top_k, extra)
        else:
            raw = await to_thread(_invoke, fn, queries, top_k, extra)
        return _per_query(backend, queries, raw, top_k)


def _per_query(backend: Any, queries: list[str], raw: Any, top_k: int) -> list[Retrieved]:
    found = list(raw)
    if len(found) != len(queries):
        raise RetrievalError(
            f"{type(backend).__name__}'s retrieve_many returned {len(found)} result lists for "
            f"{len(queries)} queries; it must return one per query, in order",
            query=queries[0],
        )
    kind = _declared_kind(backend)
    return [_collect(backend, q, results, kind, top_k) for q, results in zip(queries, found, strict=True)]


def _first_of(queries: list[str]) -> str:
    return queries[0] if len(queries) == 1 else f"{queries[0]} (and {len(queries) - 1} more)"


def _doc_key(doc: RetrievedDoc) -> str:
    """The identity duplicates share: the first 120 characters. (The specification hashes
    them with MD5; the prefix itself is the same key, without hashing it twice.)"""
    return doc.text[:120]


def _deduplicate(docs: Iterable[RetrievedDoc]) -> list[RetrievedDoc]:
    """Merge documents whose first 120 characters are the same, keeping the best score.

    Scores are compared only when both copies have comparable scores (same kind,
    known direction); otherwise the first copy (the better-ranked one) is kept.
    Order of first appearance is preserved.
    """
    best: dict[str, RetrievedDoc] = {}
    for doc in docs:
        key = _doc_key(doc)
        kept = best.get(key)
        if kept is None:
            best[key] = doc
        elif kept.score_kind is doc.score_kind:
            new, old = doc.similarity, kept.similarity
            if new is not None and (old is None or new > old):
                best[key] = doc
    return list(best.values())
