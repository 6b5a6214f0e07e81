"""``LocalLLM``: a GGUF model run in-process by llama-cpp-python.

Deterministic by default (greedy decoding, fixed seed). Steps that need JSON are
constrained by llama.cpp's JSON-schema grammar, so the reply always parses unless it
hits ``structured_max_tokens`` (then the JSON is closed where it stopped). A llama
context is not thread-safe: calls are serialised with a lock, taken with
``workers.taking`` so that a call waiting for its turn is not charged to its own
``llm_timeout`` (only to the query's deadline) and never runs once its caller gave up;
``agenerate`` runs the call on the library's threads so the event loop stays free (and
the loop's default executor, which the embedded index searches on, is never filled with
calls waiting for the model).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from selfrag_core.local.models import check_model_name, require_llama, resolve_model
from selfrag_core.profiles import SMALL_LOCAL, ModelProfile
from selfrag_core.protocols import LLMOutput
from selfrag_core.validation import check_int
from selfrag_core.workers import taking, to_thread

logger = logging.getLogger("selfrag")

#: tokens kept free for the chat template's wrapping of the prompt
_TEMPLATE_MARGIN = 64
#: llama.cpp's own messages (model loading, its KV cache, its warnings) go to this logger:
#: debug, and warning for its errors; never straight to stderr, where they would land in
#: the middle of a command's output (llama-cpp-python prints its WARN level there even with
#: verbose=False: its table of ggml's levels is an older one)
llama_logger = logging.getLogger("selfrag.llama")
#: ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5 (continues the last one)
_GGML_ERROR, _GGML_CONT = 4, 5
_llama_log: dict[str, Any] = {"last": 0, "verbose": False}


def route_llama_logs(verbose: bool = False) -> None:
    """Send llama.cpp's log to :data:`llama_logger` (once per process; ``verbose`` prints
    it on stderr too, as llama.cpp does)."""
    _llama_log["verbose"] = _llama_log["verbose"] or verbose
    if "callback" in _llama_log:
        return
    import ctypes

    import llama_cpp  # type: ignore[import-not-found,import-untyped]

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def callback(level: int, text: bytes, user_data: Any) -> None:
        level = _llama_log["last"] if level == _GGML_CONT else level
        _llama_log["last"] = level
        message = text.decode("utf-8", "replace").rstrip("\n")
        if _llama_log["verbose"]:
            print(message, file=sys.stderr, flush=True)
        elif message:
            llama_logger.log(logging.WARNING if level >= _GGML_ERROR else logging.DEBUG, "%s", message)

    _llama_log["callback"] = callback  # kept: llama.cpp holds only the C pointer
    llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))


class LocalLLM:
    """A local LLM with the core's protocols (``generate``, ``agenerate``,
    ``generate_structured``, ``agenerate_structured``) plus ``stream``.

    ``model``: ``"smollm2"`` (default, SmolLM2-135M-Instruct, chat template), ``"gemma"``
    (Gemma 3 270M base, plain completion) or a path to a ``.gguf`` file.
    ``n_threads``: None picks 2 (at most the CPUs available), or 1 when the machine is
    already busy (load average >= CPUs): llama.cpp's threads spin-wait on each other and
    slow down several-fold when they do not each get a core.
    ``n_ctx``: 2048 tokens hold the strategies' prompts with five 1000-character passages
    (about 1,500 tokens); a longer prompt loses its middle, with a warning.
    ``max_tokens`` / ``structured_max_tokens`` cap each free-text / JSON reply;
    ``hold_end_after_colon``: a free-text reply may not end while it is empty or ends
    with a colon (SmolLM2 often stops right after "The answer to the question is:").
    ``item_max_chars`` / ``string_max_chars`` bound the strings of JSON replies (list
    items / other strings) where the schema sets no ``maxLength``: tiny models fill
    strings until they are stopped.
    ``chat``: None uses the model's chat template when it has one.
    Raises MissingDependencyError (with the install command) when llama-cpp-python or
    the model package is missing, ValueError for a bad setting.
    """

    def __init__(
        self,
        model: str | Path = "smollm2",
        *,
        n_threads: int | None = None,
        n_ctx: int = 2048,
        max_tokens: int = 192,
        hold_end_after_colon: bool = True,
        structured_max_tokens: int = 256,
        item_max_chars: int = 100,
        string_max_chars: int = 600,
        temperature: float = 0.0,
        repeat_penalty: float = 1.1,
        seed: int = 0,
        chat: bool | None = None,
        system_prompt: str | None = None,
        stop: list[str] | None = None,
        verbose: bool = False,
    ) -> None:
        n_threads = auto_threads() if n_threads is None else n_threads
        for name, value in {
            "n_threads": n_threads, "n_ctx": n_ctx, "max_tokens": max_tokens,
            "structured_max_tokens": structured_max_tokens, "item_max_chars": item_max_chars,
            "string_max_chars": string_max_chars,
        }.items():  # fmt: skip
            check_int(name, value, 1)
        if n_ctx < 2 * max(max_tokens, structured_max_tokens):
            raise ValueError(f"n_ctx={n_ctx} leaves no room for prompts; use at least twice max_tokens")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        check_model_name(model)  # a bad name is a ConfigurationError, whatever is installed
        require_llama()
        path, spec = resolve_model(model)
        from llama_cpp import Llama  # type: ignore[import-not-found,import-untyped]

        route_llama_logs(verbose)
        started = time.perf_counter()
        self._llama = Llama(
            model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, seed=seed, verbose=verbose
        )
        self.load_s = time.perf_counter() - started
        self.model_path = path
        self.name = spec.name if spec else path.stem
        has_template = bool(self._llama.metadata.get("tokenizer.chat_template"))
        self.chat = (spec.chat if spec else has_template) if chat is None else chat
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_tokens = max_tokens
        self.hold_end_after_colon = hold_end_after_colon
        self.structured_max_tokens = structured_max_tokens
        self.item_max_chars = item_max_chars
        self.string_max_chars = string_max_chars
        self.system_prompt = system_prompt
        # a base model continues the prompt: stop it before it writes the next exercise
        default_stop = [] if self.chat else ["\n\nQuestion:", "\nQuestion:", "\n\n\n"]
        self.stop = list(stop) if stop is not None else default_stop
        self._sampling = {"temperature": temperature, "repeat_penalty": repeat_penalty, "seed": seed}
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}

    #: calls answered at once: one (the lock); the service runs one query at a time on it
    #: and lines the others up (``serve.admission``)
    concurrency = 1

    def __repr__(self) -> str:
        return f"LocalLLM({self.name!r}, chat={self.chat}, n_ctx={self.n_ctx})"

    @property
    def cache_identity(self) -> dict[str, Any]:
        """What decides this model's replies, as JSON (the key of
        :class:`selfrag_core.replay.CachedLLM`): ``"model"`` (the name and the model file's
        name) and every generation setting. Not ``n_threads`` or ``verbose``."""
        return {
            "model": f"{self.name}:{Path(self.model_path).name}",
            "max_tokens": self.max_tokens,
            "structured_max_tokens": self.structured_max_tokens,
            "n_ctx": self.n_ctx,
            "chat": bool(self.chat),
            "stop": list(self.stop),
            "system_prompt": self.system_prompt,
            "item_max_chars": self.item_max_chars,
            "string_max_chars": self.string_max_chars,
            "hold_end_after_colon": bool(self.hold_end_after_colon),
            # floats as floats: temperature=0 and 0.0 are one setting, and one key
            "temperature": float(self._sampling["temperature"]),
            "repeat_penalty": float(self._sampling["repeat_penalty"]),
            "seed": int(self._sampling["seed"]),
        }

    @property
    def profile(self) -> ModelProfile:
        """What this model can do, which sizes the strategies built for it
        (:func:`selfrag_core.profiles.profile_of`): ``SMALL_LOCAL``, not deterministic when
        it samples (``temperature`` > 0)."""
        if self._sampling["temperature"] == 0:
            return SMALL_LOCAL
        return dataclasses.replace(SMALL_LOCAL, deterministic=False)

    # ------------------------------------------------------------------ protocols
    def generate(self, prompt: str) -> LLMOutput:
        with taking(self._lock):
            response = self._complete(prompt, self.max_tokens, None)
        return self._output(response, structured=False)

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        """JSON text that matches ``schema`` (a JSON schema), enforced by a grammar."""
        with taking(self._lock):
            grammar = self._grammar(schema)
            response = self._complete(prompt, self.structured_max_tokens, grammar)
        return self._output(response, structured=True)

    async def agenerate(self, prompt: str) -> LLMOutput:
        return await to_thread(self.generate, prompt)

    async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> LLMOutput:
        return await to_thread(self.generate_structured, prompt, schema)

    def stream(self, prompt: str) -> Iterator[str | LLMOutput]:
        """Yield the reply piece by piece (the model is locked until the generator ends),
        then an empty ``LLMOutput`` with the call's token counts, which llama.cpp's
        streamed chunks do not carry (a streamed answer reported none: issue #52): the
        prompt's tokens are the context's length when the first token comes (the prompt
        evaluated, from an empty context), the reply's one a chunk."""
        prompt_tokens: int | None = None
        reply_tokens = 0
        with taking(self._lock):
            for chunk in self._complete(prompt, self.max_tokens, None, stream=True):
                choice = chunk["choices"][0]
                if choice.get("finish_reason") is not None:
                    continue
                delta = choice.get("delta", {})
                if self.chat and "content" not in delta:  # the role's chunk, before the first token
                    continue
                if prompt_tokens is None:
                    prompt_tokens = _context_length(self._llama)
                reply_tokens += 1
                piece = delta.get("content") if self.chat else choice.get("text")
                if piece:
                    yield piece
        yield LLMOutput("", prompt_tokens, reply_tokens)

    # ------------------------------------------------------------------ internals
    def _complete(self, prompt: str, max_tokens: int, grammar: Any, *, stream: bool = False) -> Any:
        prompt = self._fit(prompt, max_tokens)
        kwargs: dict[str, Any] = {
            "max_tokens": max_tokens, "grammar": grammar, "stream": stream, "stop": self.stop or None,
            **self._sampling,
        }  # fmt: skip
        if grammar is None and self.hold_end_after_colon:
            kwargs["logits_processor"] = self._no_empty_end()
        # every prompt is evaluated from an empty context, in the same batches: llama.cpp's
        # reuse of a cached prefix (the previous prompt's, or the whole prompt re-run as one
        # token) changes the logits in their last bits, enough to flip a greedy choice, so
        # one prompt got two replies depending on what was sent before it
        self._llama.reset()  # type: ignore[no-untyped-call]
        if not self.chat:
            return self._llama.create_completion(prompt, **kwargs)
        messages: list[Any] = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return self._llama.create_chat_completion(messages=messages, **kwargs)

    def _no_empty_end(self) -> Any:
        """A logits processor banning end-of-text while the reply is empty or ends with ':'."""
        from llama_cpp import LogitsProcessorList  # type: ignore[import-not-found,import-untyped]

        eos: int = self._llama.token_eos()
        start: list[int] = []

        def processor(input_ids: Any, scores: Any) -> Any:
            if not start:
                start.append(len(input_ids))  # the prompt's length, at the first step
            generated = input_ids[start[0] :]
            if len(generated) < 64:  # a preamble comes first; later tokens are not checked
                text = self._llama.detokenize(list(generated)).decode("utf-8", errors="ignore").rstrip()
                if not text or text.endswith(":"):
                    scores[eos] = -float("inf")
            return scores

        return LogitsProcessorList([processor])

    def _output(self, response: dict[str, Any], *, structured: bool) -> LLMOutput:
        choice = response["choices"][0]
        text = (choice["message"]["content"] if self.chat else choice["text"]) or ""
        if structured and choice.get("finish_reason") == "length":
            logger.warning(
                "%s: JSON reply cut at %d tokens; closing it", self.name, self.structured_max_tokens
            )
            text = close_json(text)
        usage = response.get("usage") or {}
        return LLMOutput(text.strip(), usage.get("prompt_tokens"), usage.get("completion_tokens"))

    def _fit(self, prompt: str, max_tokens: int) -> str:
        """Cut the middle of a prompt too long for the context (instructions and the
        question sit at its ends), with a warning."""
        tokens = self._llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=False)
        budget = self.n_ctx - max_tokens - _TEMPLATE_MARGIN
        if len(tokens) <= budget:
            return prompt
        logger.warning(
            "%s: prompt of %d tokens exceeds the context (n_ctx=%d); its middle is cut",
            self.name, len(tokens), self.n_ctx,
        )  # fmt: skip
        head, tail = tokens[: budget // 2], tokens[len(tokens) - (budget - budget // 2) :]
        text: str = self._llama.detokenize(head).decode("utf-8", errors="ignore")
        return text + "\n...\n" + self._llama.detokenize(tail).decode("utf-8", errors="ignore")

    def _grammar(self, schema: dict[str, Any]) -> Any:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            from llama_cpp.llama_grammar import LlamaGrammar  # type: ignore[import-not-found,import-untyped]

            bounded = bound_schema(schema, self.item_max_chars, self.string_max_chars)
            self._grammars[key] = LlamaGrammar.from_json_schema(json.dumps(bounded), verbose=False)
        return self._grammars[key]


def _context_length(llama: Any) -> int | None:
    """The tokens in a llama context (``Llama.n_tokens``), None where it has no such count."""
    n = getattr(llama, "n_tokens", None)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def auto_threads(preferred: int = 2) -> int:
    """``preferred`` threads, capped at the CPUs this process may use; 1 on a busy machine."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0] >= cpus
    except (AttributeError, OSError):  # pragma: no cover - Windows
        busy = False
    return 1 if busy else max(1, min(preferred, cpus))


def bound_schema(schema: Any, item_max_chars: int, string_max_chars: int, *, in_array: bool = False) -> Any:
    """A copy of ``schema`` whose unbounded strings get a ``maxLength`` and whose
    integer ranges become enums (llama-cpp-python's grammar ignores min/max)."""
    if isinstance(schema, list):
        return [bound_schema(s, item_max_chars, string_max_chars, in_array=in_array) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "items":
            out[key] = bound_schema(value, item_max_chars, string_max_chars, in_array=True)
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: bound_schema(v, item_max_chars, string_max_chars) for k, v in value.items()}
        else:
            out[key] = bound_schema(value, item_max_chars, string_max_chars)
    if out.get("type") == "string" and "maxLength" not in out and "enum" not in out:
        out["maxLength"] = item_max_chars if in_array else string_max_chars
    lo, hi = out.get("minimum"), out.get("maximum")
    if out.get("type") == "integer" and isinstance(lo, int) and isinstance(hi, int) and 0 <= hi - lo <= 100:
        out = {k: v for k, v in out.items() if k not in ("type", "minimum", "maximum")}
        out["enum"] = list(range(lo, hi + 1))
    return out


def _scan(text: str) -> tuple[list[str], bool, bool]:
    """The closers still needed by ``text``, whether it ends inside a string, and
    whether it ends on a pending backslash escape."""
    stack: list[str] = []
    in_str = esc = False
    for ch in text:
        if esc:
            esc = False
        elif in_str:
            esc = ch == "\\"
            in_str = esc or ch != '"'
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    return stack, in_str, esc


def close_json(text: str) -> str:
    """Close JSON cut off mid-way: end an open string, drop a dangling key or comma,
    close open arrays and objects. Text that cannot be repaired is returned as is."""
    stack, in_str, esc = _scan(text)
    if not stack:
        return text
    repaired = (text[:-1] if esc else text) + ('"' if in_str else "")
    trimmed = repaired.rstrip().rstrip(",:").rstrip()
    for candidate in (repaired, trimmed, trimmed.rsplit(",", 1)[0]):
        closed = candidate + "".join(reversed(_scan(candidate)[0]))
        try:
            json.loads(closed, strict=False)
        except ValueError:
            continue
        return closed
    return text
