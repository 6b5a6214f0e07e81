"""The OpenAI-compatible surface of the service: ``GET /v1/models`` and ``POST
/v1/chat/completions``, so an OpenAI SDK or a chat front end talks to a strategy.

Each strategy is a model, ``selfrag-<name>`` (the bare name is accepted too). A chat
completion is a query of that strategy run exactly as ``/query/{name}`` runs it (the same
token, limits, admission control, metrics and execution:
:func:`serve.service.answer_query`); only the shapes differ, and this module makes them
OpenAI's:

- the question is the last message (the user's); earlier user/assistant pairs are the
  conversation, given as ``memory`` to the strategies that take one (``SelfHealingRAG``)
  and ignored by the others; system messages, ``temperature``, ``max_tokens`` and every
  other OpenAI field are accepted and ignored, and the response says what it ignored;
- the response is a ``chat.completion`` (``usage`` from the trace's token counts) with
  one extra top-level field, ``selfrag``: the ``/query`` result without its answer
  (``sources``, ``citations``, ``trace``, the strategy's own fields) and ``request`` (what
  was made of the request);
- a stream is ``chat.completion.chunk`` server-sent events ending in ``data: [DONE]``.
  The content deltas join to the answer: by default the answer is sent once it is final
  (a strategy may replace the text it streamed); with ``selfrag.live_tokens`` in the
  request the tokens come as generated, and a chunk with ``selfrag.event == "reset"``
  says that the content sent before it is void (the answer follows). The service's other
  stream events (the steps) come as chunks with an empty delta and ``selfrag.event``;
- every error has OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``
  (:class:`OpenAIErrors`), with the service's status and headers (``Retry-After``);
- no answer is never a plain completion: when the LLM or the backend failed it is the
  service's 502 (``code`` ``no_answer``), a timeout or a used-up budget its 504; otherwise
  (no documents, unusable replies) the completion's content is the placeholder and
  ``selfrag.no_answer`` says why (null for an answer; see ``/query``'s ``no_answer``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from selfrag_core.memory import ConversationMemory
from selfrag_core.serve.models import OPTIONS, OPTIONS_ACCEPTED, QueryRequest
from selfrag_core.serve.responses import FastJSONResponse, dumps
from selfrag_core.serve.service import ApiError, Reply, ServiceState, answer_query

PREFIX = "selfrag-"
DONE = "data: [DONE]\n\n"


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, ...: ignored
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None

    @field_validator("content")
    @classmethod
    def _text_only(cls, content: str | list[TextPart] | None) -> str | list[TextPart] | None:
        if isinstance(content, list) and (other := [p.type for p in content if p.type != "text"]):
            raise ValueError(f"selfrag answers text: send text parts only, not {', '.join(other)}")
        return content

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(part.text or "" for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat completion request. Fields not declared here (``temperature``,
    ``max_tokens``, ``top_p``, ``tools``, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(description="selfrag-<strategy> (see GET /v1/models) or the strategy's name")
    messages: list[ChatMessage] = Field(min_length=1, description="the last one is the user's question")
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, description="1 (selfrag answers with one choice)")
    selfrag: dict[str, Any] | None = Field(
        None,
        description="extension: /query options (top_k, max_refinement_iterations, confidence_threshold, "
        "max_depth, max_llm_calls, timeout, metadata_filter) and live_tokens (the tokens as generated)",
    )

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int) -> int:
        if n != 1:
            raise ValueError(f"selfrag answers with one choice; send n=1, not {n}")
        return n

    @model_validator(mode="after")
    def _ends_with_a_question(self) -> ChatCompletionRequest:
        if self.messages[-1].role != "user":
            raise ValueError(
                f"the last message is the {self.messages[-1].role}'s; end with the user's question"
            )
        return self

    def ignored(self) -> list[str]:
        """What of the request selfrag does not use, to be told in the response."""
        names = sorted(self.model_extra or {})
        names += sorted(
            {f"messages[role={m.role}]" for m in self.messages if m.role not in ("user", "assistant")}
        )
        return names


def conversation(messages: list[ChatMessage]) -> list[tuple[str, str]]:
    """The (question, answer) turns before the question: each user message followed by an
    assistant's (a question left unanswered is dropped)."""
    turns, question = [], None
    for message in messages[:-1]:
        if message.role == "user":
            question = message.text
        elif message.role == "assistant" and question is not None:
            turns.append((question, message.text))
            question = None
    return turns


def strategy_of(model: str, state: ServiceState) -> str:
    """The strategy ``model`` names, or a 404 listing the models."""
    for name in (model.removeprefix(PREFIX), model):
        if name in state.strategies:
            return name
    known = ", ".join(PREFIX + name for name in sorted(state.strategies))
    raise ApiError(404, f"the model {model!r} does not exist; this server has: {known}", "model_not_found")


class ChatReply(Reply):
    """One chat completion's response in OpenAI's shapes (JSON or chunks)."""

    def __init__(
        self, body: ChatCompletionRequest, name: str, memory: ConversationMemory | None, live: bool
    ) -> None:
        self.id, self.created, self.model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.model
        self.live = live
        self.include_usage = body.stream_options is not None and body.stream_options.include_usage
        self.context = {"memory": memory} if memory is not None else {}
        turns = len(memory) if memory is not None else len(conversation(body.messages))
        self.request = {
            "strategy": name,
            "conversation_turns": turns,
            "conversation": "none" if not turns else "used" if memory is not None else "ignored",
            "ignored": body.ignored(),
        }
        self.sent = False  # a live stream's content since its last reset
        self.pending = ""  # whitespace held back (the answer has none at its ends)

    def json(self, status: int, content: dict[str, Any]) -> Response:
        if status != 200:  # the service's error shape, made OpenAI's by OpenAIErrors
            return super().json(status, content)
        message = {"role": "assistant", "content": content.get("answer", "")}
        return FastJSONResponse(
            {
                **self._head("chat.completion"),
                "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
                "usage": usage(content),
                "selfrag": self._extension(content),
            }
        )

    def events(self, event: str, data: dict[str, Any]) -> Iterable[str]:
        if event == "start":
            return [self._chunk({"role": "assistant", "content": ""})]
        if event == "token":
            return self._token(data["text"]) if self.live else []
        if event == "reset":
            if not self.live:
                return []
            self.sent, self.pending = False, ""
            return [self._chunk({}, selfrag={"event": "reset"})]
        if event == "result":
            chunks = [] if self.live else self._token(data.get("answer", ""))
            chunks.append(self._chunk({}, "stop", selfrag=self._extension(data)))
            if self.include_usage:
                chunks.append(
                    _sse({**self._head("chat.completion.chunk"), "choices": [], "usage": usage(data)})
                )
            return [*chunks, DONE]
        if event == "error":
            return [_sse(openai_error(data)), DONE]
        if event == "trace":  # the trace comes whole in the last chunk
            return []
        return [self._chunk({}, selfrag={"event": event, "data": data})]  # a step

    def _token(self, text: str) -> list[str]:
        """The answer's next piece, without the whitespace at the answer's ends."""
        text = self.pending + text if self.sent else text.lstrip()
        content = text.rstrip()
        self.pending = text[len(content) :]
        if not content:
            return []
        self.sent = True
        return [self._chunk({"content": content})]

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return _sse({**self._head("chat.completion.chunk"), "choices": [choice], **extra})

    def _extension(self, result: Mapping[str, Any]) -> dict[str, Any]:
        return {**{k: v for k, v in result.items() if k != "answer"}, "request": self.request}


def usage(result: Mapping[str, Any]) -> dict[str, int]:
    """OpenAI's usage from a result's trace (0 where the model reports no counts)."""
    trace = result.get("trace") or {}
    prompt, completion = int(trace.get("input_tokens") or 0), int(trace.get("output_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse(data: Any) -> str:
    return f"data: {dumps(data).decode()}\n\n"


def openai_error(content: Mapping[str, Any]) -> dict[str, Any]:
    """The service's error body (``{"error": {"type", "message", "status"}, ...}``) in
    OpenAI's shape; the other top-level fields (a 504's partial ``trace``) are kept."""
    error = content.get("error") or {}
    status, kind = int(error.get("status", 500)), str(error.get("type", "error"))
    details = content.get("details") or [{}]
    loc = [str(x) for x in details[0].get("loc", ())]
    rest = {k: v for k, v in content.items() if k not in ("error", "details")}
    return {
        "error": {
            "message": str(error.get("message", "")),
            "type": "invalid_request_error" if status < 500 else "server_error",
            "param": ".".join(loc[1:]) if loc[:1] == ["body"] and len(loc) > 1 else None,
            "code": "invalid_api_key" if status == 401 else kind,
        },
        **rest,
    }


class OpenAIErrors:
    """ASGI middleware: a JSON error under ``/v1/`` (whoever answered it: the token
    check, the body limit, validation, admission control, a failed query) in OpenAI's
    shape, with its status and headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        body: list[bytes] = []

        async def translate(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", ()))
                if message["status"] >= 400 and b"json" in headers.get(b"content-type", b""):
                    start = message  # held until the body is whole
                    return
            elif start is not None and message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                await self._send_error(send, start, b"".join(body))
                return
            await send(message)

        await self.app(scope, receive, translate)

    @staticmethod
    async def _send_error(send: Send, start: Message, raw: bytes) -> None:
        try:
            content = json.loads(raw)
            data = dumps(openai_error(content)) if isinstance(content, dict) and "error" in content else raw
        except ValueError:
            data = raw
        headers = [(k, v) for k, v in start.get("headers", ()) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(data)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": data})


def add_openai_routes(app: FastAPI, state: ServiceState) -> None:
    """Mount ``/v1/models`` and ``/v1/chat/completions`` (after the app's middleware, so
    that :class:`OpenAIErrors` also sees the token check's refusals)."""
    app.add_middleware(OpenAIErrors)
    created = int(time.time())

    def card(name: str) -> dict[str, Any]:
        return {"id": PREFIX + name, "object": "model", "created": created, "owned_by": "selfrag"}

    @app.get("/v1/models", tags=["openai"], summary="The strategies as OpenAI models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [card(name) for name in state.strategies]}

    @app.get("/v1/models/{model}", tags=["openai"], summary="One strategy as an OpenAI model")
    async def get_model(model: str) -> dict[str, Any]:
        return card(strategy_of(model, state))

    @app.post("/v1/chat/completions", tags=["openai"], summary="Answer the last user message with a strategy")
    async def chat_completions(request: Request, body: ChatCompletionRequest) -> Response:
        name = strategy_of(body.model, state)
        options = dict(body.selfrag or {})
        live = options.pop("live_tokens", False)
        if not isinstance(live, bool):
            raise ApiError(422, f"selfrag.live_tokens is {live!r}; send true or false")
        if unknown := sorted(set(options) - OPTIONS_ACCEPTED):
            raise ApiError(
                422, f"selfrag.{unknown[0]} is not an option; the options are {', '.join(sorted(OPTIONS))}"
            )
        try:
            query = QueryRequest.model_validate(
                {**options, "question": body.messages[-1].text, "stream": body.stream}
            )
        except ValidationError as e:
            raise RequestValidationError(
                [{**err, "loc": ("body", "selfrag", *err["loc"])} for err in e.errors()]
            ) from e
        turns = conversation(body.messages)
        memory = None
        if turns and state.strategies[name].conversational:
            memory = ConversationMemory()
            for question, answer in turns:
                memory.add(question, answer)
        return await answer_query(state, name, query, request, ChatReply(body, name, memory, live))
