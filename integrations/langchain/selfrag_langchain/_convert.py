"""Every conversion between LangChain objects and selfrag's types, in one place.

A score travels in a ``Document``'s metadata as ``score`` with its ``score_kind``
("similarity", "distance" or "unknown"); a ``score`` without a ``score_kind`` is the
user's own metadata and is left alone. A retriever's documents carry
``selfrag_partial_failure`` when some of its run's retrievals failed (see
:class:`selfrag_core.RetrievalWatch`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage

from selfrag_core import LLMCallError, LLMOutput, Result, RetrievedDoc, ScoreKind

SCORE_KEY = "score"
KIND_KEY = "score_kind"
#: keys of an input dict holding the question (the first present wins)
QUESTION_KEYS = ("question", "query", "input")
#: metadata key of a retriever's documents when some of its run's retrievals failed
PARTIAL_FAILURE_KEY = "selfrag_partial_failure"


def to_document(doc: RetrievedDoc) -> Document:
    metadata = dict(doc.metadata)
    if doc.score is not None:
        metadata[SCORE_KEY] = doc.score
        metadata[KIND_KEY] = doc.score_kind.value
    return Document(page_content=doc.text, metadata=metadata, id=doc.id)


def to_documents(docs: list[RetrievedDoc], failure: str | None) -> list[Document]:
    """``docs`` as ``Document``s, each with ``failure`` (what failed) under
    :data:`PARTIAL_FAILURE_KEY` when some retrievals failed."""
    documents = [to_document(d) for d in docs]
    for document in documents if failure else ():
        document.metadata[PARTIAL_FAILURE_KEY] = failure
    return documents


def from_document(
    doc: Document, score: float | None = None, kind: ScoreKind = ScoreKind.UNKNOWN
) -> RetrievedDoc:
    metadata = dict(doc.metadata or {})
    if score is None and KIND_KEY in metadata:
        raw_kind = metadata.pop(KIND_KEY)
        raw_score = metadata.pop(SCORE_KEY, None)
        score = None if raw_score is None else float(raw_score)
        kind = ScoreKind(raw_kind) if raw_kind in {k.value for k in ScoreKind} else ScoreKind.UNKNOWN
    doc_id = doc.id if doc.id is not None else metadata.get("id")
    return RetrievedDoc(
        text=doc.page_content,
        score=None if score is None else float(score),
        metadata=metadata,
        id=None if doc_id is None else str(doc_id),
        score_kind=kind if score is not None else ScoreKind.UNKNOWN,
    )


def _usage(message: Any) -> tuple[int | None, int | None]:
    usage = getattr(message, "usage_metadata", None) or {}
    return usage.get("input_tokens"), usage.get("output_tokens")


def reply_output(reply: Any, model_name: str) -> LLMOutput:
    """A chat message or a string LLM's text as ``LLMOutput``; raises on an empty reply."""
    if isinstance(reply, str):
        text = reply
    elif isinstance(reply, BaseMessage):
        text = reply.text  # text content blocks only: reasoning and tool-call blocks are skipped
    else:
        raise LLMCallError(
            f"{model_name} returned {type(reply).__name__}; expected a message or a string. "
            "Pass a chat model or an LLM, not a chain with a parser."
        )
    if not text.strip():
        tool_calls = getattr(reply, "tool_calls", None)
        hint = f" (it asked for tool calls {[c['name'] for c in tool_calls]})" if tool_calls else ""
        raise LLMCallError(
            f"{model_name} returned an empty message{hint}; the attempt counts as failed and is "
            "retried. Check the model's max_tokens and that no tools are bound to it."
        )
    return LLMOutput(text, *_usage(reply))


def structured_output(out: Mapping[str, Any], model_name: str) -> LLMOutput:
    """The ``include_raw=True`` output of ``with_structured_output`` as JSON text."""
    raw = out.get("raw")
    parsed = out.get("parsed")
    if parsed is None:  # the model's text did not parse: give it to the core's tolerant parser
        return reply_output(raw, model_name)
    data = parsed.model_dump() if hasattr(parsed, "model_dump") else parsed
    return LLMOutput(json.dumps(data, ensure_ascii=False), *_usage(raw))


def question_of(value: Any) -> tuple[str, dict[str, Any] | None]:
    """The question (and optional ``context`` dict) from a runnable's input."""
    if isinstance(value, str):
        return value, None
    if not isinstance(value, Mapping):
        raise TypeError(
            f"input must be a str or a dict with a 'question' key, got {type(value).__name__}; "
            'in LCEL, map it first: {"question": RunnablePassthrough()} | runnable'
        )
    key = next((k for k in QUESTION_KEYS if k in value), None)
    if key is None:
        raise ValueError(
            f"the input dict has no question: expected one of the keys {list(QUESTION_KEYS)}, "
            f"got {sorted(map(str, value))}"
        )
    question, context = value[key], value.get("context")
    if not isinstance(question, str):
        raise TypeError(f"input[{key!r}] must be a str, got {type(question).__name__}")
    if context is not None and not isinstance(context, Mapping):
        raise TypeError(f"input['context'] must be a dict, got {type(context).__name__}")
    return question, None if context is None else dict(context)


_LIFTED = ("answer", "sources", "citations", "no_answer", "trace")


def result_output(result: Result[RetrievedDoc], question: str) -> dict[str, Any]:
    """A strategy result as the runnable's output dict.

    ``answer`` (str), ``no_answer`` (None when ``answer`` is an answer, else why there is
    none: ``answer`` is then a placeholder; see ``selfrag_core.NO_ANSWER_REASONS``),
    ``sources`` (``Document`` list, numbered from 1 as the answer's ``[n]`` markers count
    them), ``citations`` (each sentence of the answer with the sources it cites and those
    that support it), ``confidence`` (float or None: SelfIRAG's confidence, or the best
    healing score), ``trace`` (dict), ``strategy``, ``question`` and ``details``: the rest
    of the result's ``to_dict()``.
    """
    data = result.to_dict()
    confidence = data.get("confidence")  # None when unknown (the judge could not be read)
    scores = data.get("scores")
    if confidence is None and scores:
        confidence = max(scores)
    return {
        "question": question,
        "answer": result.answer,
        "no_answer": result.no_answer,
        "sources": [to_document(d) for d in result.documents],
        "citations": data["citations"],
        "confidence": confidence,
        "trace": data["trace"],
        "strategy": type(result).__name__,
        "details": {k: v for k, v in data.items() if k not in _LIFTED},
    }
