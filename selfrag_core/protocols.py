"""What the core needs from its dependencies, as structural protocols.

Nothing here must be subclassed: any object with the right methods works. The public
parameters are typed with the unions below, so a type checker tells a user who passes
something the library cannot call (as Haystack types its components' dependencies):

* :data:`LLMLike`: ``generate(prompt)`` (or ``agenerate``, or their structured forms), a
  LangChain chat model (``invoke``), a LlamaIndex LLM (``complete``) or a callable;
  see ``selfrag_core.llm``.
* :data:`BackendLike`: ``retrieve(query, top_k)`` (or ``aretrieve``), a LlamaIndex
  retriever (``retrieve(query)``), a LangChain retriever (``invoke``) or vector store
  (``similarity_search``), or a callable; see ``selfrag_core.retrieval``.

These are the front door. Each object is resolved once into the one narrow contract the
engine calls (``selfrag_core.retrieval.resolve_backend`` gives a ``Backend`` with
``retrieve`` / ``aretrieve`` and, where the object has them, ``retrieve_many`` /
``aretrieve_many``; ``selfrag_core.llm.resolve_llm`` an ``LLMClient`` with ``generate`` /
``agenerate``, structured output and streaming); what LangChain and LlamaIndex objects
are is recognised in ``selfrag_core.frameworks``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union, runtime_checkable


@dataclass(frozen=True)
class LLMOutput:
    """What an LLM may return instead of a plain string, to report token usage."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: fallbacks the model took to produce this reply, as ``(name, message)`` pairs (e.g. a
    #: structured-output method the server refused): recorded in the query's trace
    fallbacks: tuple[tuple[str, str], ...] = ()


@runtime_checkable
class LLM(Protocol):
    """The minimal LLM: ``generate(prompt) -> str`` (or an ``LLMOutput``)."""

    def generate(self, prompt: str) -> str | LLMOutput: ...


@runtime_checkable
class AsyncLLM(Protocol):
    async def agenerate(self, prompt: str) -> str | LLMOutput: ...


@runtime_checkable
class StructuredLLM(Protocol):
    """An LLM that can be constrained to a JSON schema (grammar, JSON mode, tools).

    The core passes the schema for the steps whose output it parses as JSON
    (evaluation, decomposition, faithfulness). The return value is JSON text.
    """

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> str | LLMOutput: ...


@runtime_checkable
class AsyncStructuredLLM(Protocol):
    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> str | LLMOutput: ...


@runtime_checkable
class Invokable(Protocol):
    """A LangChain runnable: a chat model, or a retriever (``invoke(input)``)."""

    def invoke(self, input: Any, /) -> Any: ...


@runtime_checkable
class Completable(Protocol):
    """A LlamaIndex LLM (``complete(prompt)``)."""

    def complete(self, prompt: str, /) -> Any: ...


@runtime_checkable
class Retriever(Protocol):
    """A retrieval backend. Any output format ``_retrieve_safe`` knows is accepted."""

    def retrieve(self, query: str, top_k: int) -> Any: ...


@runtime_checkable
class AsyncRetriever(Protocol):
    async def aretrieve(self, query: str, top_k: int) -> Any: ...


@runtime_checkable
class QueryRetriever(Protocol):
    """A LlamaIndex retriever (``retrieve(query)``: its own ``similarity_top_k``)."""

    def retrieve(self, query: Any, /) -> Any: ...


@runtime_checkable
class VectorStore(Protocol):
    """A LangChain vector store (``similarity_search(query)``)."""

    def similarity_search(self, query: str, /) -> Any: ...


@runtime_checkable
class Embeddings(Protocol):
    """Dense embedder used by the embedded backend."""

    def embed_documents(self, texts: list[str]) -> Any: ...

    def embed_query(self, text: str) -> Any: ...


#: what the strategies accept as their LLM (see the module docstring)
LLMLike = Union[
    LLM, AsyncLLM, StructuredLLM, AsyncStructuredLLM, Invokable, Completable, Callable[[str], Any]
]
#: what the strategies accept as their retrieval backend (see the module docstring)
BackendLike = Union[Retriever, AsyncRetriever, QueryRetriever, Invokable, VectorStore, Callable[..., Any]]


# ----------------------------------------------------------------------------- verifiers


@dataclass(frozen=True)
class Verdict:
    """How far one passage supports one sentence: ``score`` in [0, 1], ``supported`` at
    the verifier's threshold, the passage (0-based) that supports it best, and why the
    score was capped or is low (``"number_not_in_source:2019"``, ``"misattributed:Bob"``,
    ``"negation"``, ``"list_item_not_in_source"``, ``"repetition"``, ``"low_overlap"``),
    or None."""

    score: float
    supported: bool
    passage: int | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": round(self.score, 4),
            "supported": self.supported,
            "passage": self.passage,
            "reason": self.reason,
        }


@runtime_checkable
class Verifier(Protocol):
    """Sentences and passages in; for each sentence, one verdict per passage out (each
    ``Verdict.passage`` its passage's index). ``threshold``: the score at which a passage
    supports a sentence. ``question``: what the sentences answer ("" when unknown), for a
    verifier that uses it (the lexical one does not count the question's own names and
    numbers as claims: they are given, not claimed); others may ignore it."""

    threshold: float

    def verify(
        self, sentences: Sequence[str], passages: Sequence[str], question: str = ""
    ) -> list[list[Verdict]]: ...
