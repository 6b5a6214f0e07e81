"""LangChainLLM's structured-output fallbacks (json_schema -> json_mode -> plain text)
keep the caller's generation limits at every step, whether they are the model's fields
or bound with ``.bind``; and an abandoned call neither falls back nor logs while the
program exits."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import Field

from selfrag_langchain import LangChainLLM

SCHEMA = {"type": "object", "properties": {"relevance": {"type": "integer"}}, "required": ["relevance"]}
FORMATS = {"json_schema": "json_schema", "json_mode": "json_object"}


class Refused(Exception):
    """What llama.cpp's server answers a response_format it cannot do: HTTP 500."""

    status_code = 500


class LimitedChatModel(BaseChatModel):
    """Records the limits each call ran with (its fields, overridden by call kwargs);
    refuses the response formats in ``refuse``, like an OpenAI-compatible server."""

    max_tokens: int | None = None
    temperature: float | None = None
    stop: list[str] | None = None
    refuse: list[str] = Field(default_factory=list)
    calls: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "limited-fake"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        fmt = (kwargs.get("response_format") or {}).get("type")
        self.calls.append({
            "format": fmt,
            "max_tokens": kwargs.get("max_tokens", self.max_tokens),
            "temperature": kwargs.get("temperature", self.temperature),
            "stop": stop or self.stop,
        })  # fmt: skip
        if fmt in self.refuse or (fmt is None and "text" in self.refuse):
            raise Refused(f"500: {fmt} is not supported")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content='{"relevance": 8}'))])

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, method: str = "json_schema",
                               **kwargs: Any) -> Any:  # fmt: skip
        bound = self.bind(response_format={"type": FORMATS[method]})  # as ChatOpenAI does

        def parse(message: AIMessage) -> Any:
            return {"raw": message, "parsed": json.loads(message.text), "parsing_error": None}

        return bound | RunnableLambda(parse)


LIMITS = {"max_tokens": 80, "temperature": 0.0, "stop": ["\n\n"]}


def as_given(how: str, **options: Any) -> tuple[Any, LimitedChatModel]:
    if how == "fields":
        model = LimitedChatModel(**LIMITS, **options)
        return model, model
    model = LimitedChatModel(max_tokens=2048, temperature=0.9, **options)
    return model.bind(**LIMITS), model


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("how", ["fields", "bound"])
async def test_every_fallback_step_keeps_the_callers_limits(how: str, use_async: bool) -> None:
    given, model = as_given(how, refuse=["json_schema", "json_object"])
    llm = LangChainLLM(given)
    call = llm.agenerate_structured if use_async else llm.generate_structured
    output = call("evaluate this", SCHEMA)
    output = await output if use_async else output
    assert output.text == '{"relevance": 8}'
    assert [c["format"] for c in model.calls] == ["json_schema", "json_object", None]  # every step taken
    assert all({k: c[k] for k in LIMITS} == LIMITS for c in model.calls), model.calls
    assert [name for name, _ in output.fallbacks] == ["structured_output_refused"] * 2


@pytest.mark.parametrize("how", ["fields", "bound"])
def test_the_method_that_works_keeps_the_limits_too(how: str) -> None:
    given, model = as_given(how, refuse=["json_schema"])
    llm = LangChainLLM(given)
    for _ in range(2):
        assert llm.generate_structured("evaluate this", SCHEMA).text == '{"relevance": 8}'
    assert [c["format"] for c in model.calls] == ["json_schema", "json_object", "json_object"]
    assert all({k: c[k] for k in LIMITS} == LIMITS for c in model.calls), model.calls


def test_a_bound_setting_the_model_has_no_field_for_turns_structured_output_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = LimitedChatModel()
    llm = LangChainLLM(model.bind(max_tokens=80, logit_bias={"42": -100}))
    assert llm.structured_runnable(SCHEMA) is None
    assert "logit_bias" in caplog.text and "structured output is off" in caplog.text
    assert llm.generate_structured("evaluate this", SCHEMA).text == '{"relevance": 8}'
    assert [c["format"] for c in model.calls] == [None] and model.calls[0]["max_tokens"] == 80


#: a structured call abandoned by a 0.2 s timeout wakes up while the program exits (a
#: non-daemon thread keeps the exit going), where an executor refuses work: before the
#: fix, LangChainLLM took that for a refused method, logged a fallback and went on
PROGRAM = textwrap.dedent(
    """
    import concurrent.futures, sys, threading, time
    sys.path.insert(0, sys.argv[1])
    from test_lc_llm_limits import SCHEMA, LimitedChatModel
    from selfrag_core.llm import call_llm_detailed
    from selfrag_langchain import LangChainLLM

    class SlowModel(LimitedChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            time.sleep(0.5)
            concurrent.futures.ThreadPoolExecutor(1).submit(print).result()  # as an HTTP client's pool
            return super()._generate(messages, stop, run_manager, **kwargs)

    try:
        call_llm_detailed(LangChainLLM(SlowModel(max_tokens=80)), "p", 0, schema=SCHEMA, timeout=0.2)
    except Exception as e:
        print("abandoned:", type(e).__name__, flush=True)
    threading.Thread(target=time.sleep, args=(1.5,)).start()
    """
)


def test_an_abandoned_structured_call_is_silent_while_the_program_exits() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "abandoned: LLMTimeoutError" in done.stdout
    assert "selfrag fallback" not in done.stderr and "Traceback" not in done.stderr, done.stderr
