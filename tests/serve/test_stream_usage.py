"""A streamed answer reports its tokens (issue #52): with ``stream`` and
``stream_options.include_usage`` the usage chunk was 0/0/0 and the trace's input_tokens
0 on the local model, while the same request unstreamed reported 492/15, because
llama.cpp's streamed chunks carry no counts and ``LocalLLM.stream`` yielded text only.
Here a ``LocalLLM`` runs over a scripted llama context that counts as llama.cpp does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from serve_helpers import ANSWER, make_rag, serving

from selfrag_core.local.llm import LocalLLM
from selfrag_core.protocols import LLMOutput
from selfrag_core.strategies import PlainRAG

TEMPLATE_TOKENS = 9  # what a chat template adds to the prompt


class ScriptedLlama:
    """``llama_cpp.Llama``'s surface that ``LocalLLM`` uses: whitespace tokens; usage in a
    whole reply; none in a stream, where ``n_tokens`` is the context's length (the prompt
    once evaluated, then one more per token generated after the first)."""

    def __init__(self) -> None:
        self.n_tokens = 0

    def tokenize(self, text: bytes, add_bos: bool = False, special: bool = False) -> list[bytes]:
        return text.split()

    def reset(self) -> None:
        self.n_tokens = 0

    def create_chat_completion(self, messages: list[dict[str, str]], stream: bool = False, **_: Any) -> Any:
        prompt = len(messages[-1]["content"].split()) + TEMPLATE_TOKENS
        words = ANSWER.split(" ")
        if not stream:
            choice = {"message": {"content": ANSWER}, "finish_reason": "stop"}
            return {"choices": [choice], "usage": {"prompt_tokens": prompt, "completion_tokens": len(words)}}
        return self._chunks(prompt, words)

    def _chunks(self, prompt: int, words: list[str]) -> Iterator[dict[str, Any]]:
        self.n_tokens = prompt
        yield {"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}
        for i, word in enumerate(words):
            yield {"choices": [{"delta": {"content": (" " if i else "") + word}, "finish_reason": None}]}
            self.n_tokens += 1
        yield {"choices": [{"delta": {}, "finish_reason": "stop"}]}


def scripted_local_llm() -> LocalLLM:
    llm = LocalLLM.__new__(LocalLLM)  # no model file: the scripted context instead
    llm.__dict__.update(
        _llama=ScriptedLlama(), _lock=threading.Lock(), _grammars={}, name="scripted", chat=True,
        n_ctx=2048, max_tokens=64, structured_max_tokens=64, hold_end_after_colon=False, stop=[],
        system_prompt=None, item_max_chars=100, string_max_chars=600,
        _sampling={"temperature": 0.0, "repeat_penalty": 1.1, "seed": 0},
    )  # fmt: skip
    return llm


def test_the_local_models_stream_ends_with_its_token_counts() -> None:
    llm = scripted_local_llm()
    prompt = "Name the capital of France."
    pieces = list(llm.stream(prompt))
    whole = llm.generate(prompt)
    assert "".join(p for p in pieces if isinstance(p, str)) == whole.text == ANSWER
    assert pieces[-1] == LLMOutput("", whole.input_tokens, whole.output_tokens)
    assert (whole.input_tokens, whole.output_tokens) == (5 + TEMPLATE_TOKENS, len(ANSWER.split()))


def test_a_streamed_chat_completion_reports_the_usage_of_an_unstreamed_one() -> None:
    rag, llm = make_rag(), scripted_local_llm()
    body = {"model": "selfrag-plain", "messages": [{"role": "user", "content": "Capital of France?"}]}
    with serving(rag, llm, {"plain": PlainRAG(rag, llm)}) as server, server.client() as client:
        unstreamed = client.post("/v1/chat/completions", json=body).json()["usage"]
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        with client.stream("POST", "/v1/chat/completions", json=streamed) as response:
            chunks = [
                json.loads(line[len("data: ") :])
                for line in response.iter_lines()
                if line.startswith("data: ") and line != "data: [DONE]"
            ]
        query = {"question": "Capital of France?", "stream": True}
        with client.stream("POST", "/query/plain", json=query) as r:
            result = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")][-1]
    assert unstreamed["prompt_tokens"] > TEMPLATE_TOKENS and unstreamed["completion_tokens"] > 0
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage == unstreamed
    trace = chunks[-2]["selfrag"]["trace"]
    assert (trace["input_tokens"], trace["output_tokens"]) == (
        unstreamed["prompt_tokens"],
        unstreamed["completion_tokens"],
    )
    assert result["trace"]["input_tokens"] == unstreamed["prompt_tokens"]
