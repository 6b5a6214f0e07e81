"""Real llama-index-core test doubles: a ranking hash embedding, a scripted CustomLLM
(sync, async, streaming, token usage), a tiny corpus and the scripts of each strategy."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from pydantic import Field, PrivateAttr

_WORD = re.compile(r"[a-z0-9]+")


def hash_vector(text: str, dim: int = 128) -> list[float]:
    """Signed feature hashing of lower-cased words, L2-normalised: texts sharing words rank higher."""
    vec = [0.0] * dim
    for word in _WORD.findall(text.lower()):
        h = int.from_bytes(hashlib.md5(word.encode(), usedforsecurity=False).digest()[:4], "little")
        vec[h % dim] += 1.0 if (h >> 31) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class HashEmbedding(BaseEmbedding):
    @classmethod
    def class_name(cls) -> str:
        return "test_hash_embedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return hash_vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return hash_vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return hash_vector(text)


Rule = Callable[[str], str]


class ScriptedLLM(CustomLLM):
    """Replies with the first ``(substring, reply)`` rule found in the prompt (else
    ``default``); ``latency`` seconds per call (time.sleep / asyncio.sleep); reports
    usage in ``raw`` like OpenAI; logs prompts."""

    rules: list[tuple[str, str]] = Field(default_factory=list)
    default: str = "scripted answer"
    latency: float = 0.0
    function_calling: bool = False
    _prompts: list[str] = PrivateAttr(default_factory=list)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted", is_function_calling_model=self.function_calling)

    @property
    def prompts(self) -> list[str]:
        return list(self._prompts)

    def _reply(self, prompt: str) -> CompletionResponse:
        with self._lock:
            self._prompts.append(prompt)
        text = next((reply for key, reply in self.rules if key in prompt), self.default)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        return CompletionResponse(text=text, raw={"usage": usage})

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if self.latency:
            time.sleep(self.latency)
        return self._reply(prompt)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        await asyncio.sleep(self.latency)
        return self._reply(prompt)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = self._reply(prompt).text

        def gen() -> CompletionResponseGen:
            acc = ""
            for word in text.split(" "):
                acc += word + " "
                yield CompletionResponse(text=acc, delta=word + " ")

        return gen()


CORPUS = [
    ("paris", "Paris is the capital of France and sits on the river Seine."),
    ("berlin", "Berlin is the capital of Germany; the Spree flows through it."),
    ("madrid", "Madrid is the capital of Spain, on the Manzanares river."),
    ("rome", "Rome is the capital of Italy and lies on the Tiber."),
    ("braces", 'A JSON example {"key": {value}} with braces {0} that break str.format.'),
]


def evaluation(score: int = 9) -> str:
    return json.dumps(
        {"relevance": score, "accuracy": score, "completeness": score, "clarity": score,
         "issues": [], "suggestions": []}
    )  # fmt: skip


def answer_and_evaluation(answer: str, score: int = 9) -> str:
    return json.dumps({"answer": answer, **json.loads(evaluation(score))})


SELF_RAG_RULES = [
    ("then judge your own answer", answer_and_evaluation("Paris is the capital of France.")),
    ("from these documents only", "Paris is the capital of France."),
]


HYDE_RULES = [
    ("Write a passage", "Paris is the capital of France, on the Seine."),
    ("from these documents only", "Paris is the capital of France."),
]
RECURSIVE_RULES = [
    (
        "SUBQUESTIONS:",
        json.dumps({"items": ["What is the capital of France?", "What is the capital of Spain?"]}),
    ),
    ("Combine the answers", "Paris is the capital of France and Madrid the capital of Spain."),
    ("capital of France?", "Paris is the capital of France."),
    ("capital of Spain?", "Madrid is the capital of Spain."),
]
HEALING_RULES = [
    (
        "factual claims",
        json.dumps({"claims": [{"claim": "Paris is the capital of France", "supported": True}]}),
    ),
    ("Answer using only the provided context", "Paris is the capital of France."),
]
