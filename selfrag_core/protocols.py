"""What the core needs from its dependencies, as structural protocols.

Nothing here must be subclassed: any object with the right methods works. The core
also accepts LangChain models (``invoke``/``ainvoke``), LlamaIndex LLMs
(``complete``/``acomplete``) and plain callables; see ``selfrag_core.llm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class LLMOutput:
    """What an LLM may return instead of a plain string, to report token usage."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None


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
class Retriever(Protocol):
    """A retrieval backend. Any output format ``_retrieve_safe`` knows is accepted."""

    def retrieve(self, query: str, top_k: int) -> Any: ...


@runtime_checkable
class DocumentSink(Protocol):
    def add_document(self, text: str, metadata: dict[str, Any]) -> Any: ...


@runtime_checkable
class Embeddings(Protocol):
    """Dense embedder used by the embedded backend."""

    def embed_documents(self, texts: list[str]) -> Any: ...

    def embed_query(self, text: str) -> Any: ...
