"""Every conversion between LlamaIndex objects and the core's types, in one place."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode
from pydantic import BaseModel, Field, create_model

from selfrag_core import LLMOutput, Result, RetrievedDoc, ScoreKind, normalize_results

logger = logging.getLogger("selfrag")

#: metadata key of a retriever's nodes when some of its run's retrievals failed (kept out
#: of the text LlamaIndex gives the LLM and the embedder)
PARTIAL_FAILURE_KEY = "selfrag_partial_failure"


def docs_from_nodes(nodes: list[Any]) -> tuple[list[RetrievedDoc], list[str]]:
    """The documents of ``nodes`` and the ids of the nodes skipped for having no text."""
    docs = normalize_results(nodes, score_kind=ScoreKind.SIMILARITY)
    if len(docs) == len(nodes):
        return docs, []
    kept = {d.id for d in docs}
    return docs, [node_id for node_id in map(_node_id, nodes) if node_id not in kept]


def _node_id(item: Any) -> str:
    node = getattr(item, "node", item)
    return str(getattr(node, "node_id", None) or getattr(node, "id_", None) or type(node).__name__)


def doc_id(doc: RetrievedDoc) -> str:
    """The document's own id, or a stable one derived from its text."""
    if doc.id:
        return doc.id
    return "selfrag-" + hashlib.sha1(doc.text.encode("utf-8"), usedforsecurity=False).hexdigest()[:16]


def node_from_doc(doc: RetrievedDoc, known: Mapping[str, BaseNode] | None = None) -> NodeWithScore:
    """A ``NodeWithScore`` for a core document: the backend's own node when ``known``
    holds its id, else a ``TextNode``. Only similarities become node scores
    (LlamaIndex reads scores as "higher is better"); other kinds keep ``score=None``
    with the raw value in a new node's metadata."""
    score = doc.score if doc.score_kind is ScoreKind.SIMILARITY else None
    if known and doc.id is not None and doc.id in known:
        return NodeWithScore(node=known[doc.id], score=score)
    metadata = dict(doc.metadata)
    if doc.score is not None and doc.score_kind is not ScoreKind.SIMILARITY:
        metadata["selfrag_score"] = doc.score
        metadata["selfrag_score_kind"] = doc.score_kind.value
    return NodeWithScore(node=TextNode(text=doc.text, id_=doc_id(doc), metadata=metadata), score=score)


def marked(nodes: list[NodeWithScore], failure: str | None) -> list[NodeWithScore]:
    """``nodes``, each a copy carrying ``failure`` under :data:`PARTIAL_FAILURE_KEY` when
    some retrievals failed (the backend's own node objects are left as they are)."""
    if not failure:
        return nodes
    copies = []
    for item in nodes:
        node = item.node.model_copy(deep=False)
        node.metadata = {**node.metadata, PARTIAL_FAILURE_KEY: failure}
        node.excluded_llm_metadata_keys = [*node.excluded_llm_metadata_keys, PARTIAL_FAILURE_KEY]
        node.excluded_embed_metadata_keys = [*node.excluded_embed_metadata_keys, PARTIAL_FAILURE_KEY]
        copies.append(NodeWithScore(node=node, score=item.score))
    return copies


def query_text(query: Any) -> tuple[str, list[dict[str, Any]]]:
    """The question of a ``str`` or ``QueryBundle``, with notes on what was not used.

    The core embeds the query text itself, so a bundle's ``custom_embedding_strs``,
    ``embedding`` or ``image_path`` cannot be honoured: ``query_str`` is used, and the
    log and ``response.metadata["adapter_notes"]`` say so.
    """
    if isinstance(query, str):
        return query, []
    if not isinstance(query, QueryBundle):
        raise TypeError(f"query must be a str or a QueryBundle, got {type(query).__name__}")
    notes = []
    if query.custom_embedding_strs and list(query.custom_embedding_strs) != [query.query_str]:
        notes.append(
            note(
                "custom_embedding_strs_ignored",
                "selfrag retrieves with the query text; the bundle's custom_embedding_strs were not used",
                {"custom_embedding_strs": [s[:200] for s in query.custom_embedding_strs]},
            )
        )
    if getattr(query, "image_path", None):
        notes.append(
            note(
                "image_path_ignored",
                "selfrag answers from the query text; the bundle's image was not used",
                {"image_path": str(query.image_path)[:200]},
            )
        )
    if query.embedding is not None:
        notes.append(
            note(
                "embedding_ignored",
                "selfrag retrieves with the query text; the bundle's embedding was not used",
            )
        )
    return query.query_str, notes


def note(name: str, error: str, detail: dict[str, Any] | None = None) -> dict[str, Any]:
    """An adapter-level fallback, logged like the core's and shown in the response."""
    logger.warning("selfrag fallback: %s (%s)", name, error)
    return {"name": name, "error": error, "detail": detail or {}}


def response_metadata(
    result: Result[RetrievedDoc], strategy: Any, notes: list[dict[str, Any]]
) -> dict[str, Any]:
    """``Response.metadata``: the result's ``to_dict()`` (``no_answer``: None, or why there
    is no answer, the response text being a placeholder; confidence/scores, sub-questions,
    hypothetical documents, trace) without the answer and sources (those are the response
    text and its ``source_nodes``), plus a list of every fallback taken by the core or the
    adapter."""
    data = result.to_dict()
    metadata = {k: v for k, v in data.items() if k not in ("answer", "sources")}
    metadata["strategy"] = type(strategy).__name__
    core_fallbacks = [e.name for e in result.trace.fallbacks]
    metadata["fallbacks"] = core_fallbacks + [n["name"] for n in notes]
    metadata["adapter_notes"] = notes
    return metadata


def llm_output(response: Any) -> LLMOutput:
    """Text and token counts of a ``CompletionResponse``: from ``raw["usage"]`` /
    ``raw.usage`` (OpenAI-style ``prompt_tokens`` / ``completion_tokens``, or
    ``input_tokens`` / ``output_tokens``) or ``additional_kwargs``."""
    text = getattr(response, "text", None)
    text = text if isinstance(text, str) else str(response)
    raw = getattr(response, "raw", None)
    usage = raw.get("usage") if isinstance(raw, dict) else getattr(raw, "usage", None)
    if usage is not None and not isinstance(usage, dict):
        usage = getattr(usage, "__dict__", None) or (
            usage.model_dump() if hasattr(usage, "model_dump") else None
        )
    sources = [u for u in (usage, getattr(response, "additional_kwargs", None)) if isinstance(u, dict)]
    return LLMOutput(
        text,
        _count(sources, "prompt_tokens", "input_tokens"),
        _count(sources, "completion_tokens", "output_tokens"),
    )


def _count(sources: list[dict[str, Any]], *keys: str) -> int | None:
    for source in sources:
        for key in keys:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}


def model_from_schema(schema: dict[str, Any], name: str = "SelfragOutput") -> type[BaseModel]:
    """A pydantic model for one of the core's JSON schemas (objects, arrays, scalars)."""
    return _model_from_key(json.dumps(schema, sort_keys=True), name)


@lru_cache(maxsize=64)
def _model_from_key(key: str, name: str) -> type[BaseModel]:
    schema = json.loads(key)
    required = set(schema.get("required", []))
    fields: dict[str, Any] = {}
    for prop, sub in schema.get("properties", {}).items():
        annotation = _annotation(sub, f"{name}_{prop}")
        fields[prop] = (annotation, Field(...)) if prop in required else (annotation | None, None)
    return create_model(name, **fields)


def _annotation(schema: dict[str, Any], name: str) -> Any:
    kind = schema.get("type")
    if kind == "object":
        return model_from_schema(schema, name)
    if kind == "array":
        return list[_annotation(schema.get("items", {}), name)]  # type: ignore[misc]
    return _SCALARS.get(str(kind), Any)
