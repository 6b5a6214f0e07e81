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
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, NoReturn

from selfrag_core import frameworks
from selfrag_core.errors import ConfigurationError, RetrievalError, misconfiguration_hint, misconfigured
from selfrag_core.frameworks import Resolutions
from selfrag_core.llm import is_coroutine_callable, run_coroutine_sync
from selfrag_core.types import RetrievedDoc, ScoreKind
from selfrag_core.workers import to_thread

#: the public names (what the adapters may import); the underscored helpers are the engine's
__all__ = [
    "Backend",
    "Retrieved",
    "astore_search",
    "data_source_id",
    "ignored_options",
    "normalize_results",
    "resolve_backend",
    "store_search",
    "supports_many",
]

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


def _collect(backend: object, query: str, raw: Any, kind: ScoreKind, top_k: int) -> Retrieved:
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


def _declared_kind(backend: object) -> ScoreKind:
    return _kind_of(getattr(backend, "score_kind", ScoreKind.UNKNOWN))


def data_source_id(backend: object) -> str:
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


def ignored_options(backend: object, options: Options, *, use_async: bool, many: bool = False) -> list[str]:
    """The names of the ``options`` set (not None) that a retrieval from ``backend`` does
    not pass on, because the function it calls does not take them: LangChain and
    LlamaIndex objects take none; other backends what their ``retrieve`` (``aretrieve``,
    ``retrieve_many``, ...) names or takes as ``**kwargs``. ``many``: a batched
    retrieval (:meth:`Backend.retrieve_many`)."""
    names = [k for k, v in options.items() if v is not None]
    if not names:
        return []
    return resolve_backend(backend).ignored(names, use_async=use_async, many=many)


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


@contextlib.contextmanager
def _wrapped(backend: object, query: str) -> Iterator[None]:
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


# ------------------------------------------------------------------ the resolved backend

#: what a backend's function takes: parameter names ("**" for **kwargs), None if unknown
Names = frozenset[str] | None
#: one query's raw output and its score kind (None: the backend's declared kind)
Found = tuple[object, ScoreKind | None]
_Getter = Callable[[], Any]
#: a retrieval's options (e.g. ``metadata_filter``), for the functions that take them
Options = Mapping[str, object]
_Call = Callable[[str, int, Options], Found]
_ACall = Callable[[str, int, Options], Awaitable[Found]]


def _takes(names: Names, name: str) -> bool:
    return names is not None and (name in names or "**" in names)


def _options_for(names: Names, top_k: int, extra: Options) -> dict[str, object]:
    """The options of ``extra`` (set, not None) that a function of ``names`` takes, and
    ``top_k`` when it names it."""
    kwargs = {k: v for k, v in extra.items() if v is not None and _takes(names, k)}
    if _takes(names, "top_k"):
        kwargs["top_k"] = top_k
    return kwargs


def _call_with(fn: Any, names: Names, first: object, top_k: int, extra: Options) -> Any:
    """``fn(first, top_k=top_k, **extra)`` with only the options ``fn`` takes (``names``);
    ``top_k`` goes second by position to a ``fn`` that does not name it."""
    kwargs = _options_for(names, top_k, extra)
    return fn(first, **kwargs) if "top_k" in kwargs else fn(first, top_k, **kwargs)


def _raiser(message: str) -> _Call:
    def fail(query: str, top_k: int, extra: Options) -> NoReturn:
        raise TypeError(message)

    return fail


def _awaiting(get: _Getter, names: Names) -> _ACall:
    async def call(q: str, k: int, extra: Options) -> Found:
        return await _call_with(get(), names, q, k, extra), None

    return call


class Backend:
    """A retrieval backend resolved once (:func:`resolve_backend`): the one contract the
    engine calls. What the object is (a LangChain vector store or retriever, a LlamaIndex
    retriever, an object with ``retrieve``/``aretrieve``, a sync or async callable), the
    function each call reaches, the options that function takes (read from its signature)
    and whether it answers several queries at once are decided when it is resolved; a
    call only calls.

    :meth:`retrieve` and :meth:`aretrieve` return a :class:`Retrieved` (normalised, copies
    merged, the ``top_k`` best); ``options`` (e.g. ``metadata_filter``) reach only a
    function that takes them (:meth:`ignored` names the others). :attr:`many` says whether
    :meth:`retrieve_many` / :meth:`aretrieve_many` answer a list of queries in one call.
    It holds the object weakly: it serves while the object lives.
    """

    __slots__ = (
        "__weakref__",
        "_async",
        "_async_names",
        "_many_async",
        "_many_sync",
        "_source",
        "_sync",
        "_sync_names",
        "many",
        "score_kind",
    )  # fmt: skip
    _sync: _Call
    _async: _ACall

    def __init__(self, backend: object, hold: Callable[[str | None, object], _Getter]) -> None:
        self._source = hold(None, backend)
        self.score_kind = _declared_kind(backend)
        #: whether the backend answers several queries in one call (:func:`supports_many`)
        self.many = any(callable(getattr(backend, n, None)) for n in ("retrieve_many", "aretrieve_many"))
        self._sync_names: Names | Exception = None  # the options a call passes on (None: none)
        self._async_names: Names | Exception = None
        if frameworks.is_langchain_vectorstore(backend):
            self._sync, self._async = self._store_search, self._astore_search
        elif frameworks.is_langchain_retriever(backend):  # (top_k is taken after copies are merged)
            self._sync = self._by_query(hold("invoke", backend.invoke))  # type: ignore[attr-defined]
            self._async = self._aby_query(hold("ainvoke", getattr(backend, "ainvoke", None)))
        elif frameworks.is_llamaindex_retriever(backend):
            self._sync = self._by_query(hold("retrieve", backend.retrieve))  # type: ignore[attr-defined]
            if hasattr(backend, "aretrieve"):
                self._async = self._aby_query(hold("aretrieve", backend.aretrieve))
            else:
                self._async = self._resolve_async(backend, hold)
            self._async_names = None  # (a LlamaIndex retriever takes no options)
        else:
            self._sync = self._resolve_sync(backend, hold)
            self._async = self._resolve_async(backend, hold)
        self._many_sync = self._resolve_many(backend, hold, use_async=False)
        self._many_async = self._resolve_many(backend, hold, use_async=True)

    # -------------------------------------------------------------- resolution
    def _resolve_sync(self, backend: object, hold: Callable[[str | None, object], _Getter]) -> _Call:
        """A backend's ``retrieve``, else the backend itself when it is callable."""
        fn = getattr(backend, "retrieve", None)
        name: str | None = "retrieve"
        if fn is None and callable(backend):
            fn, name = backend, None
        if fn is None:
            message = f"{type(backend).__name__} is not a retrieval backend: it needs retrieve(query, top_k)"
            self._sync_names = TypeError(message)
            return _raiser(message)
        names = self._sync_names = _parameters(fn)
        get = hold(name, fn)
        if is_coroutine_callable(fn):  # (an async function, or an object with an async __call__)
            return lambda q, k, extra: (
                run_coroutine_sync(lambda: _call_with(get(), names, q, k, extra)),
                None,
            )
        return lambda q, k, extra: (_call_with(get(), names, q, k, extra), None)

    def _resolve_async(self, backend: object, hold: Callable[[str | None, object], _Getter]) -> _ACall:
        """An async ``aretrieve`` or ``retrieve``, else the backend itself when calling it
        gives a coroutine; else the sync call, in a worker thread."""
        for name in ("aretrieve", "retrieve"):
            fn = getattr(backend, name, None)
            if fn is not None and inspect.iscoroutinefunction(fn):
                names = self._async_names = _parameters(fn)
                return _awaiting(hold(name, fn), names)
        if is_coroutine_callable(backend):
            names = self._async_names = _parameters(backend)
            source = self._source

            async def called(q: str, k: int, extra: Options) -> Found:
                return await source()(q, **_options_for(names, k, extra)), None

            return called
        self._async_names = self._sync_names
        sync = self._sync

        async def threaded(q: str, k: int, extra: Options) -> Found:
            return await to_thread(sync, q, k, extra)  # type: ignore[no-any-return]

        return threaded

    @staticmethod
    def _resolve_many(
        backend: object, hold: Callable[[str | None, object], _Getter], *, use_async: bool
    ) -> tuple[_Getter, Names, bool]:
        """The batch function a batched retrieval calls, the options it takes, and whether
        it is awaited: sync code prefers ``retrieve_many``, async code an async
        ``aretrieve_many``."""
        first, second = (
            ("aretrieve_many", "retrieve_many") if use_async else ("retrieve_many", "aretrieve_many")
        )
        fn = getattr(backend, first, None)
        wanted = inspect.iscoroutinefunction(fn) if use_async else callable(fn)
        name = first if wanted else second
        if not wanted:
            fn = getattr(backend, second, None)
        if fn is None:  # (then calling it raises TypeError, as calling None does)
            return (lambda: None), None, name == "aretrieve_many"
        return hold(name, fn), (None if fn is None else _parameters(fn)), name == "aretrieve_many"

    def _store_search(self, query: str, top_k: int, extra: Options) -> Found:
        return store_search(self._source(), query, top_k)

    async def _astore_search(self, query: str, top_k: int, extra: Options) -> Found:
        return await astore_search(self._source(), query, top_k)

    @staticmethod
    def _by_query(get: _Getter) -> _Call:
        return lambda q, k, extra: (get()(q), None)

    @staticmethod
    def _aby_query(get: _Getter) -> _ACall:
        async def call(q: str, k: int, extra: Options) -> Found:
            return await get()(q), None

        return call

    # -------------------------------------------------------------- the contract
    @property
    def source(self) -> object:
        """The object resolved."""
        return self._source()

    @property
    def retrieves(self) -> bool:
        """Whether the object is a retrieval backend: it has a sync or an async retrieval
        (else a retrieval raises TypeError saying what it needs)."""
        return not isinstance(self._async_names, Exception)

    def ignored(self, names: Iterable[str], *, use_async: bool, many: bool = False) -> list[str]:
        """Those of the option ``names`` that a retrieval does not pass on (its function
        does not take them)."""
        if many:
            taken: Names | Exception = (self._many_async if use_async else self._many_sync)[1]
        else:
            taken = self._async_names if use_async else self._sync_names
        if isinstance(taken, Exception):  # not a backend: the sync call raises
            raise TypeError(str(taken))
        return [k for k in names if not _takes(taken, k)]

    def retrieve(self, query: str, top_k: int = 5, **options: object) -> Retrieved:
        """The ``top_k`` documents for ``query`` (see :func:`_retrieve_safe`)."""
        source = self._source()
        with _wrapped(source, query):
            raw, kind = self._sync(query, top_k, options)
            return _collect(source, query, raw, kind or self.score_kind, top_k)

    async def aretrieve(self, query: str, top_k: int = 5, **options: object) -> Retrieved:
        """Async :meth:`retrieve`: the backend's async API where it has one."""
        source = self._source()
        with _wrapped(source, query):
            raw, kind = await self._async(query, top_k, options)
            return _collect(source, query, raw, kind or self.score_kind, top_k)

    def retrieve_many(self, queries: list[str], top_k: int = 5, **options: object) -> list[Retrieved]:
        """:meth:`retrieve` for each of ``queries``, in one call of the backend's
        ``retrieve_many`` (or ``aretrieve_many``)."""
        if not queries:
            return []
        source = self._source()
        with _wrapped(source, _first_of(queries)):
            get, names, awaited = self._many_sync
            if awaited:
                raw = run_coroutine_sync(lambda: _call_with(get(), names, queries, top_k, options))
            else:
                raw = _call_with(get(), names, queries, top_k, options)
            return self._per_query(source, queries, raw, top_k)

    async def aretrieve_many(self, queries: list[str], top_k: int = 5, **options: object) -> list[Retrieved]:
        """Async :meth:`retrieve_many`: ``aretrieve_many`` where the backend has it, else
        ``retrieve_many`` in a worker thread."""
        if not queries:
            return []
        source = self._source()
        with _wrapped(source, _first_of(queries)):
            get, names, awaited = self._many_async
            if awaited:
                raw = await _call_with(get(), names, queries, top_k, options)
            else:
                raw = await to_thread(_call_with, get(), names, queries, top_k, options)
            return self._per_query(source, queries, raw, top_k)

    def _per_query(self, source: object, queries: list[str], raw: Any, top_k: int) -> list[Retrieved]:
        found = list(raw)
        if len(found) != len(queries):
            raise RetrievalError(
                f"{type(source).__name__}'s retrieve_many returned {len(found)} result lists for "
                f"{len(queries)} queries; it must return one per query, in order",
                query=queries[0],
            )
        kind = self.score_kind
        return [_collect(source, q, results, kind, top_k) for q, results in zip(queries, found, strict=True)]


_RESOLVED: Resolutions[Backend] = Resolutions()


def resolve_backend(backend: object) -> Backend:
    """``backend`` (anything :data:`~selfrag_core.protocols.BackendLike`) as the one
    contract the engine calls, a :class:`Backend`: decided once per object (and kept
    while it lives), so that a retrieval does no recognition, signature or attribute
    work. A :class:`Backend` is returned as it is."""
    if type(backend) is Backend:
        return backend
    return _RESOLVED.get(backend, Backend)


def _retrieve_safe(backend: object, query: str, top_k: int = 5, **extra: object) -> Retrieved:
    """Retrieve ``top_k`` documents for ``query`` from any backend, normalised, copies
    merged (a :class:`Retrieved`: a list, with the items it could not read described).

    ``extra`` keyword arguments (e.g. ``metadata_filter``) are passed only to
    backends whose ``retrieve`` accepts them. Raises :class:`RetrievalError` if the
    backend raises, or returns items of which none can be read.
    """
    return resolve_backend(backend).retrieve(query, top_k, **extra)


async def _aretrieve_safe(backend: object, query: str, top_k: int = 5, **extra: object) -> Retrieved:
    """Async :func:`_retrieve_safe`: uses the backend's async API where it has one."""
    return await resolve_backend(backend).aretrieve(query, top_k, **extra)


def supports_many(backend: object) -> bool:
    """Whether ``backend`` answers several queries in one call, with
    ``retrieve_many(queries, top_k)`` and/or an async ``aretrieve_many`` returning one
    result list per query (the embedded store's ``RAG`` has both)."""
    return resolve_backend(backend).many


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
