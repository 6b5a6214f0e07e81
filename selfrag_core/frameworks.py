"""Recognising LangChain and LlamaIndex objects without importing either framework.

The one home of the core's framework knowledge: what makes an object a LangChain
runnable (a chat model, an LLM, a chain), a LlamaIndex LLM, a LangChain vector store or
retriever, a LlamaIndex retriever, query engine or response. ``selfrag_core.llm`` and
``selfrag_core.retrieval`` ask these predicates once per object, when they resolve it
(``resolve_llm``, ``resolve_backend``); the evaluation harness, of a contender and of
what it answers.

An object is recognised by the names of its classes (:func:`mro_names`) or the package
they come from (:func:`from_package`), so a user's subclass (a ``CustomLLM``, a
``BaseRetriever``) living in the user's own module is recognised too.
"""

from __future__ import annotations

import contextlib
import functools
import types
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from selfrag_core.errors import ConfigurationError

__all__ = [
    "Resolutions",
    "from_package",
    "is_langchain_retriever",
    "is_langchain_runnable",
    "is_langchain_vectorstore",
    "is_llamaindex_llm",
    "is_llamaindex_query_engine",
    "is_llamaindex_response",
    "is_llamaindex_retriever",
    "mro_names",
]

T = TypeVar("T")


def mro_names(obj: object) -> frozenset[str]:
    """The names of the classes ``obj`` is an instance of (kept per class)."""
    return _class_names(type(obj))  # type: ignore[arg-type]  # classes are hashable


@functools.lru_cache(maxsize=256)
def _class_names(cls: type) -> frozenset[str]:
    return frozenset(c.__name__ for c in cls.__mro__)


def from_package(obj: object, package: str) -> bool:
    """Whether ``obj`` is an instance of a class of ``package`` or of a subclass of one
    (a user's ``CustomLLM`` or ``BaseRetriever`` subclass lives in the user's module)."""
    return package in _class_packages(type(obj))  # type: ignore[arg-type]


@functools.lru_cache(maxsize=256)
def _class_packages(cls: type) -> frozenset[str]:
    return frozenset(str(c.__module__).partition(".")[0] for c in cls.__mro__)


# ---------------------------------------------------------------- LLMs and chains


def is_langchain_runnable(obj: object) -> bool:
    """A LangChain runnable (chat model, LLM, chain): ``invoke`` / ``ainvoke``."""
    return "Runnable" in mro_names(obj) and hasattr(obj, "invoke")


def is_llamaindex_llm(obj: object) -> bool:
    """A LlamaIndex LLM: ``complete`` / ``acomplete``."""
    return hasattr(obj, "complete") and from_package(obj, "llama_index")


def is_llamaindex_query_engine(obj: object) -> bool:
    """A LlamaIndex query engine: ``query(question)`` answers with a response."""
    return hasattr(obj, "query") and from_package(obj, "llama_index")


def is_llamaindex_response(obj: object) -> bool:
    """A LlamaIndex query engine's ``Response``: the answer in ``response``, the documents
    in ``source_nodes``."""
    return hasattr(obj, "response") and hasattr(obj, "source_nodes") and from_package(obj, "llama_index")


# --------------------------------------------------------------------------- backends


def is_langchain_vectorstore(obj: object) -> bool:
    """A LangChain ``VectorStore`` (searched with ``retrieval.store_search``)."""
    return "VectorStore" in mro_names(obj) and hasattr(obj, "similarity_search_with_score")


def is_langchain_retriever(obj: object) -> bool:
    """A LangChain ``BaseRetriever``: ``invoke(query)`` (its own ``k``)."""
    return "BaseRetriever" in mro_names(obj) and hasattr(obj, "invoke")


def is_llamaindex_retriever(obj: object) -> bool:
    """A LlamaIndex retriever: ``retrieve(query)`` (its own ``similarity_top_k``)."""
    return from_package(obj, "llama_index") and hasattr(obj, "retrieve")


# ------------------------------------------------------------------ resolving once


Getter = Callable[[], Any]


class Resolutions(Generic[T]):
    """What an object was resolved into, kept per live object: the object is keyed by
    identity (LangChain's pydantic models are unhashable) and its entry goes when the
    object is collected. ``build(obj, hold)`` makes the resolution; it must keep what it
    found on ``obj`` (a bound method, the object itself) through ``hold(name, found)``,
    which returns a getter that does not keep ``obj`` alive (the entry would otherwise
    keep it forever). An object that takes no weak reference is resolved on every call,
    its resolution holding what it found directly."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], T]] = {}

    def get(self, obj: object, build: Callable[[Any, Callable[[str | None, object], Getter]], T]) -> T:
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        try:
            ref = weakref.ref(obj, functools.partial(_forget, self._entries, key))
        except TypeError:  # no weak references: resolved each time, holding strongly
            return build(obj, _strongly)
        value = build(obj, functools.partial(_weakly, ref))
        self._entries[key] = (ref, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)


def _forget(entries: dict[int, Any], key: int, ref: weakref.ref[Any]) -> None:
    entry = entries.get(key)
    if entry is not None and entry[0] is ref:
        del entries[key]


def _strongly(name: str | None, found: object) -> Getter:
    return lambda: found


def _alive(owner: weakref.ref[Any]) -> Any:
    """The object ``owner`` refers to, or a :class:`ConfigurationError` saying it is gone."""
    obj = owner()
    if obj is None:
        raise ConfigurationError(
            "the object this backend or LLM was resolved from (resolve_backend, resolve_llm) "
            "has been garbage-collected: a resolution holds its object weakly, so keep a "
            "reference to the object itself for as long as you use what it resolved to"
        )
    return obj


def _weakly(owner: weakref.ref[Any], name: str | None, found: object) -> Getter:
    """A getter of ``found`` (``getattr(owner, name)``, or the owner itself when ``name`` is
    None) held weakly; should it be gone (a property that makes a new callable on each
    access), it is looked up again. Once the owner is collected a getter raises a
    :class:`ConfigurationError` that says so."""
    if name is None:
        return functools.partial(_alive, owner)
    held: Callable[[], Any] | None = None
    if type(found) is types.MethodType:  # (not a proxy that says it is one: wrapt's, say)
        if found.__self__ is owner():  # the owner's own method: its function, bound on each call
            function, bind = found.__func__, types.MethodType
            return lambda: bind(function, _alive(owner))
        held = weakref.WeakMethod(found)
    elif found is not None:
        with contextlib.suppress(TypeError):
            held = weakref.ref(found)
    if held is None and found is not None and not _refers_to(found, owner):
        return lambda: found  # (a builtin that takes no weak reference, say)

    def get() -> Any:
        value = held() if held is not None else None
        return value if value is not None else getattr(_alive(owner), name)

    return get


def _refers_to(found: object, owner: weakref.ref[Any]) -> bool:
    return getattr(found, "__self__", None) is owner()
