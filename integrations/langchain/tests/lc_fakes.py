"""Real langchain-core doubles for the adapter tests: a prompt-keyed chat model that
reports usage, can sleep (sync and async), counts calls in flight and, optionally,
answers ``with_structured_output`` with an object built from the schema; a callback
handler that records the run tree."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import Field, PrivateAttr

CORPUS = [
    "Paris is the capital of France and its largest city.",
    "The Seine river flows through Paris before reaching the English Channel.",
    "Berlin is the capital of Germany.",
    "Madrid is the capital of Spain.",
    "The Eiffel Tower in Paris was completed in 1889.",
    "Rome is the capital of Italy.",
]
ANSWER = "Paris is the capital of France."
PASSAGE = "Paris is the capital of France; the Seine river flows through Paris."
#: prompt-keyed replies: HyDE's passage prompt gets a passage, everything else the answer
RULES = {"Write a passage": PASSAGE}


def schema_value(schema: dict[str, Any], answer: str = ANSWER) -> Any:
    """A valid, confident value for a JSON schema (the judge gives 9/10, lists get items)."""
    kind = schema.get("type")
    if kind == "object":
        return {k: schema_value(v, answer) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        items = schema.get("items", {})
        if items.get("type") == "string":
            return ["What is the capital of France?", "Which river flows through Paris?"]
        return [schema_value(items, answer)]
    if kind in ("number", "integer"):
        return 9
    if kind == "boolean":
        return True
    return answer


class KeyedChatModel(BaseChatModel):
    """Replies by the first rule whose key is in the prompt, else ``default``."""

    rules: dict[str, str] = Field(default_factory=dict)
    default: str = ANSWER
    latency: float = 0.0
    structured: bool = False
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _in_flight: int = PrivateAttr(default=0)
    peak: int = 0
    prompts: list[str] = Field(default_factory=list)
    methods: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "keyed-fake"

    def _reply(self, messages: list[BaseMessage]) -> ChatResult:
        prompt = "\n".join(m.text for m in messages)
        self.prompts.append(prompt)
        text = next((reply for key, reply in self.rules.items() if key in prompt), self.default)
        usage = {"input_tokens": len(prompt.split()), "output_tokens": len(text.split())}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        return ChatResult(
            generations=[
                ChatGeneration(
                    message=AIMessage(
                        content=text, usage_metadata=usage, response_metadata={"model_name": "keyed-fake"}
                    )
                )
            ]
        )

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.peak = max(self.peak, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        self._enter()
        try:
            time.sleep(self.latency)
            return self._reply(messages)
        finally:
            self._leave()

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:  # fmt: skip
        self._enter()
        try:
            await asyncio.sleep(self.latency)
            return self._reply(messages)
        finally:
            self._leave()

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, method: str = "",
                               **kwargs: Any) -> Any:  # fmt: skip
        if not self.structured:
            raise NotImplementedError("with_structured_output is not implemented for this model.")
        self.methods.append(method)
        reply = json.dumps(schema_value(schema))
        bound = self.model_copy(update={"rules": {}, "default": reply})  # shares the call logs

        def parse(message: AIMessage) -> Any:
            parsed = json.loads(message.text)
            return {"raw": message, "parsed": parsed, "parsing_error": None} if include_raw else parsed

        return bound | RunnableLambda(parse)


def strategies(backend: Any, llm: Any) -> dict[str, Any]:
    """The library's four strategies over one backend and one LLM."""
    from selfrag_core import SelfIRAG
    from selfrag_core.strategies import HyDERAG, RecursiveRAG, SelfHealingRAG

    hyde = HyDERAG(backend, llm, num_hypothetical_docs=2)
    return {
        "SelfIRAG": SelfIRAG(backend, llm),
        "HyDERAG": hyde,
        "RecursiveRAG": RecursiveRAG(backend, llm),
        "SelfHealingRAG": SelfHealingRAG(llm, [hyde, backend]),
    }


def keyed_model(**kwargs: Any) -> KeyedChatModel:
    kwargs.setdefault("rules", RULES)
    return KeyedChatModel(**kwargs)


def vector_store(texts: list[str] = CORPUS) -> InMemoryVectorStore:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=64))
    store.add_documents(
        [Document(page_content=t, metadata={"n": i}, id=f"d{i}") for i, t in enumerate(texts)]
    )
    return store


class RunTree(BaseCallbackHandler):
    """Records every run's (type, name, parent) so tests can check the tree."""

    def __init__(self) -> None:
        self.runs: dict[UUID, tuple[str, str, UUID | None]] = {}
        self._lock = threading.Lock()

    def _add(self, kind: str, serialized: Any, run_id: UUID, parent_run_id: UUID | None,
             kwargs: dict[str, Any]) -> None:  # fmt: skip
        name = kwargs.get("name") or (serialized or {}).get("name") or kind
        with self._lock:
            self.runs[run_id] = (kind, str(name), parent_run_id)

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kwargs: Any) -> None:  # fmt: skip
        self._add("chain", serialized, run_id, parent_run_id, kwargs)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, **kwargs: Any) -> None:  # fmt: skip
        self._add("llm", serialized, run_id, parent_run_id, kwargs)

    def on_llm_start(self, serialized: Any, prompts: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:  # fmt: skip
        self._add("llm", serialized, run_id, parent_run_id, kwargs)

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID,
                           parent_run_id: UUID | None = None, **kwargs: Any) -> None:  # fmt: skip
        self._add("retriever", serialized, run_id, parent_run_id, kwargs)

    def of_kind(self, kind: str) -> list[UUID]:
        return [rid for rid, (k, _, _) in self.runs.items() if k == kind]

    def roots(self) -> list[UUID]:
        return [rid for rid, (_, _, parent) in self.runs.items() if parent is None]

    def ancestors(self, run_id: UUID) -> list[str]:
        names, parent = [], self.runs[run_id][2]
        while parent is not None:
            names.append(self.runs[parent][1])
            parent = self.runs[parent][2]
        return names
