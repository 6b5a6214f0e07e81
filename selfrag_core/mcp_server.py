"""``selfrag mcp``: the strategies, search and ingestion as a Model Context Protocol server
(extra ``[mcp]``, the official ``mcp`` SDK's low-level server), over stdio or streamable HTTP.

Tools (inputs described by a JSON schema and checked here, as every other boundary does):

* ``ask(question, strategy="self", max_llm_calls=None)``: the answer, each sentence's
  citations and their verdicts, the sources, the cost (LLM calls, tokens, seconds) and the
  failures absorbed on the way (``errors``); ``max_llm_calls`` may only lower the budget;
* ``search(query, k=5)``: the best chunks, with their scores, score kinds and sources;
* ``add_documents(documents=[{text, source?, metadata?}])``: indexed through the HTTP
  service's write path (``serve.documents.DocumentStore``: one writer at a time, saved
  with ``RAG.save`` under the index directory's lock).

Resources: one per indexed source, ``selfrag://source/<source, percent-quoted>``, whose text
is the source's indexed chunks in order (neighbouring chunks overlap); listed where the
backend can list its sources (the embedded index).

A bad input is answered as a tool error (``isError``) carrying the library's one-line
message; an unexpected failure as a tool error saying the server's log has the details
(never a stack trace). Over HTTP the app sits behind ``selfrag serve``'s guard: with
``SELFRAG_API_TOKEN`` set every request needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from selfrag_core import __version__
from selfrag_core.engine import Run
from selfrag_core.errors import InputError, MissingDependencyError, RAGSystemError, StrategyError
from selfrag_core.retrieval import _aretrieve_safe
from selfrag_core.runner import arun_query
from selfrag_core.serve.settings import ServeSettings
from selfrag_core.types import Result, RetrievedDoc
from selfrag_core.validation import validate_query

try:
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
except ImportError as e:  # the hint before any model loads, and before anything imports starlette
    raise MissingDependencyError(f"selfrag mcp needs the MCP SDK ({e}): pip install 'selfrag[mcp]'") from e

from mcp.shared.exceptions import MCPError

from selfrag_core.serve.documents import (
    DocumentError,
    DocumentStore,
    UnsupportedError,
    check_text,
)
from selfrag_core.serve.errors import INTERNAL_ERROR  # starlette (the SDK brings it): after the hint
from selfrag_core.serve.models import DocumentIn

logger = logging.getLogger("selfrag.mcp")

#: the URI of a source's resource is this followed by the source, percent-quoted
SOURCE_URI = "selfrag://source/"
#: the most documents ``search`` returns
MAX_K = 50
DEFAULT_STRATEGY = "self"

_QUESTION = {"type": "string", "minLength": 1, "description": "the question"}


def tool_list(strategies: list[str], settings: ServeSettings) -> list[types.Tool]:
    """The three tools, with the JSON schemas of their inputs."""
    document = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": settings.max_document_chars},
            "source": {"type": "string", "description": "where it comes from (default: a hash of the text)"},
            "metadata": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    return [
        types.Tool(
            name="ask",
            description="Answer a question from the indexed documents with a selfrag strategy: the answer, "
            "its citations (which sources support each sentence), the sources and the cost.",
            input_schema={
                "type": "object",
                "properties": {
                    "question": {**_QUESTION, "maxLength": settings.max_question_chars},
                    "strategy": {"type": "string", "enum": strategies, "default": DEFAULT_STRATEGY},
                    "max_llm_calls": {
                        "type": "integer", "minimum": 1,
                        "description": "LLM-call budget (only lowers the server's)",
                    },
                },
                "required": ["question"],
                "additionalProperties": False,
            },
        ),
        types.Tool(
            name="search",
            description="The indexed passages that best match a query, with their scores and sources.",
            input_schema={
                "type": "object",
                "properties": {
                    "query": {**_QUESTION, "description": "what to search for"},
                    "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 5},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        ),
        types.Tool(
            name="add_documents",
            description="Index documents (plain text) so that ask and search find them.",
            input_schema={
                "type": "object",
                "properties": {
                    "documents": {
                        "type": "array", "items": document, "minItems": 1,
                        "maxItems": settings.max_batch_documents,
                    },
                },
                "required": ["documents"],
                "additionalProperties": False,
            },
        ),
    ]  # fmt: skip


# ----------------------------------------------------------------------------- input checks


def _arguments(arguments: Mapping[str, Any] | None, allowed: tuple[str, ...], tool: str) -> dict[str, Any]:
    given = dict(arguments or {})
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise InputError(
            f"{tool} has no argument {', '.join(map(repr, unknown))}; it takes {', '.join(allowed)}"
        )
    return given


def _text(given: Mapping[str, Any], name: str, max_chars: int) -> str:
    if name not in given:
        raise InputError(f"{name} is missing; pass it as a non-empty string")
    try:
        return validate_query(given[name], name=name, max_chars=max_chars)
    except (TypeError, ValueError) as e:
        raise InputError(str(e)) from e


def _whole(value: Any, name: str, low: int, high: int | None) -> int:
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InputError(f"{name} must be a whole number {bound}, got {value!r}")
    return int(value)


def _documents(given: Mapping[str, Any], settings: ServeSettings) -> list[DocumentIn]:
    items = given.get("documents")
    if not isinstance(items, list) or not items:
        raise InputError("documents must be a non-empty list of {text, source?, metadata?} objects")
    if len(items) > settings.max_batch_documents:
        raise InputError(
            f"{len(items)} documents at once; the limit is {settings.max_batch_documents}: "
            "send them in batches"
        )
    docs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            raise InputError(f"documents[{i}] must be an object with a 'text' string")
        extra = sorted(set(item) - {"text", "source", "metadata"})
        source, metadata = item.get("source"), item.get("metadata") or {}
        named = source is None or (isinstance(source, str) and 0 < len(source) <= 1000)
        if extra or not named or not isinstance(metadata, dict):
            raise InputError(
                f"documents[{i}] must have a 'text' string, optionally a 'source' (1 to 1000 characters) "
                f"and a 'metadata' object of strings, numbers and booleans"
                + (f"; unknown: {', '.join(extra)}" if extra else "")
            )
        if not all(isinstance(v, (str, int, float, bool)) for v in metadata.values()):
            raise InputError(f"documents[{i}].metadata values must be strings, numbers or booleans")
        docs.append(DocumentIn(text=item["text"], source=source, metadata=metadata))
    return docs


# ----------------------------------------------------------------------------- results


def _score(doc: RetrievedDoc) -> float | None:
    return doc.score if doc.score is not None and math.isfinite(doc.score) else None


def _document(doc: RetrievedDoc, n: int) -> dict[str, Any]:
    return {
        "n": n, "source": doc.source, "id": doc.id, "score": _score(doc),
        "score_kind": doc.score_kind.value, "text": doc.text,
    }  # fmt: skip


def answer_of(result: Any, strategy: str, budget: int | None) -> dict[str, Any]:
    """The ``ask`` tool's reply: the answer, its citations (``sources``: the 1-based numbers of
    the sources that support the sentence; ``cited``: those the model cited), the sources, the
    cost and the failures the strategy absorbed (from its trace). ``result`` is a
    :class:`~selfrag_core.types.Result` (every strategy's is; TypeError otherwise)."""
    if not isinstance(result, Result):
        raise TypeError(
            f"the strategy {strategy!r} answered with a {type(result).__name__}, not a selfrag Result "
            "(answer, sources, citations, trace): return one from its plan"
        )
    trace = result.trace
    return {
        "answer": result.answer.strip(),
        "strategy": strategy,
        "citations": [
            {
                "sentence": c.sentence, "sources": list(c.supported_by), "cited": list(c.cited),
                "supported": c.supported, "support": round(c.support, 4), "flags": list(c.flags),
                "llm_supported": c.llm_supported,
            }
            for c in result.citations
        ],
        "sources": [_document(d, i) for i, d in enumerate(result.documents, 1)],
        "cost": {
            "llm_calls": trace.llm_calls, "input_tokens": trace.input_tokens,
            "output_tokens": trace.output_tokens, "seconds": round(trace.wall_s, 3), "max_llm_calls": budget,
        },
        "errors": [f"{e.kind} {e.name}: {e.error}" for e in trace.events if e.error],
    }  # fmt: skip


# ----------------------------------------------------------------------------- the server


class SelfragTools:
    """What the tools and resources run on: the backend, the strategies by name and the
    write path. ``index_dir``: where the embedded index is saved after each change (None for
    an external backend, written to directly)."""

    def __init__(
        self,
        rag: Any,
        strategies: Mapping[str, Any],
        *,
        index_dir: str | None = None,
        settings: ServeSettings | None = None,
    ) -> None:
        if not strategies:
            raise InputError("selfrag mcp needs at least one strategy to serve")
        self.rag = rag
        self.strategies = dict(strategies)
        self.settings = settings or ServeSettings()
        self.documents = DocumentStore(rag, index_dir)
        self.handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "ask": self.ask, "search": self.search, "add_documents": self.add_documents,
        }  # fmt: skip

    async def ask(self, arguments: dict[str, Any]) -> dict[str, Any]:
        given = _arguments(arguments, ("question", "strategy", "max_llm_calls"), "ask")
        question = _text(given, "question", self.settings.max_question_chars)
        name = given.get("strategy", DEFAULT_STRATEGY)
        if name not in self.strategies:
            raise InputError(f"unknown strategy {name!r}; choose one of {', '.join(self.strategies)}")
        strategy = self.strategies[name]
        execution = strategy.execution
        asked = given.get("max_llm_calls")
        asked = None if asked is None else _whole(asked, "max_llm_calls", 1, None)
        budget = min((b for b in (execution.max_llm_calls, asked) if b is not None), default=None)
        await self.documents.sync()
        run = Run(dataclasses.replace(execution, max_llm_calls=budget))
        try:
            result = await arun_query(strategy, question, run=run)
        except StrategyError as e:  # every attempt failed: its report tells how
            if e.report is None:
                raise
            result = e.report
        return answer_of(result, name, budget)

    async def search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        given = _arguments(arguments, ("query", "k"), "search")
        query = _text(given, "query", self.settings.max_question_chars)
        k = _whole(given.get("k", 5), "k", 1, min(MAX_K, self.settings.max_top_k))
        await self.documents.sync()
        found = await _aretrieve_safe(self.rag, query, top_k=k)
        return {"query": query, "documents": [_document(d, i) for i, d in enumerate(found, 1)]}

    async def add_documents(self, arguments: dict[str, Any]) -> dict[str, Any]:
        given = _arguments(arguments, ("documents",), "add_documents")
        docs = _documents(given, self.settings)
        try:
            for doc in docs:
                check_text(doc, self.settings.max_document_chars)
            added = await self.documents.add(docs)
        except (DocumentError, UnsupportedError) as e:
            raise InputError(str(e)) from e
        return added.model_dump()

    # ------------------------------------------------------------------ resources

    def sources(self) -> list[str]:
        """The indexed sources, where the backend lists them (the embedded index does)."""
        w = self.documents.writer
        return w.sources() if w is not None and w.can_read else []

    def read(self, uri: str) -> str:
        """The text of the source ``uri`` names. Raises InputError for another URI."""
        if not uri.startswith(SOURCE_URI):
            raise InputError(
                f"unknown resource {uri!r}; read one that resources/list names ({SOURCE_URI}...)"
            )
        source = urllib.parse.unquote(uri[len(SOURCE_URI) :])
        w = self.documents.writer
        texts = w.texts_of(source) if w is not None and source in self.sources() else []
        if not texts:
            raise InputError(f"no indexed source {source!r}; resources/list names the indexed ones")
        return "\n\n".join(texts)


def source_uri(source: str) -> str:
    return SOURCE_URI + urllib.parse.quote(source, safe="")


def _reply(data: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=data)


def _failure(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def create_server(tools: SelfragTools) -> Server[Any]:
    """The MCP server over ``tools``: its three tools and its sources as resources."""
    listed = tool_list(list(tools.strategies), tools.settings)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        handler = tools.handlers.get(params.name)
        if handler is None:
            return _failure(f"unknown tool {params.name!r}; the tools are {', '.join(tools.handlers)}")
        try:
            return _reply(await handler(dict(params.arguments or {})))
        except (RAGSystemError, ValueError) as e:  # typed, with the fix: the caller's to read
            logger.info("tool %s refused: %s", params.name, e)
            return _failure(" ".join(str(e).split()) or type(e).__name__)
        except Exception as e:  # the details stay in the log
            logger.error("tool %s failed: %s: %s", params.name, type(e).__name__, e, exc_info=e)
            return _failure(INTERNAL_ERROR)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=source_uri(s), name=s, mime_type="text/plain") for s in tools.sources()
            ]
        )

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        await tools.documents.sync()
        try:
            text = tools.read(str(params.uri))
        except InputError as e:
            raise MCPError(code=types.INVALID_PARAMS, message=str(e)) from e
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, text=text, mime_type="text/plain")]
        )

    return Server(
        "selfrag", version=__version__,
        instructions="Ask questions of the indexed documents (ask), search them (search), add to them "
        "(add_documents); each indexed source is a resource.",
        on_list_tools=list_tools, on_call_tool=call_tool,
        on_list_resources=list_resources, on_read_resource=read_resource,
    )  # fmt: skip


def run_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it disconnects."""

    async def serve() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(serve)


def http_app(server: Server[Any], settings: ServeSettings, host: str = "127.0.0.1") -> Any:
    """The streamable HTTP app (at ``/mcp``) behind ``selfrag serve``'s guard: the bearer
    token when ``settings.api_token`` is set, the body size limit, no stack trace on a crash."""
    from selfrag_core.serve.middleware import GuardMiddleware

    app = server.streamable_http_app(host=host, max_request_body_size=settings.max_body_bytes)
    return GuardMiddleware(app, settings=settings)
