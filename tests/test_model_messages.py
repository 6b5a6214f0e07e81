"""Issue 34, finding 4: what the model clients say is readable: llama.cpp's own log
never lands on stderr in the middle of a command's output (it goes to the
``selfrag.llama`` logger), and the OpenAI-compatible client's fallback warning quotes
the server's message, not the client's escaped repr of the JSON body."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from selfrag_core.protocols import LLMOutput


def test_llama_cpp_warnings_go_to_the_log_not_to_stderr(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("llama_cpp")
    from selfrag_core.local import llm as local_llm

    local_llm.route_llama_logs()
    callback = local_llm._llama_log["callback"]
    with caplog.at_level(logging.DEBUG, logger="selfrag.llama"):
        # ggml's WARN (3), the line Gemma's KV cache prints; and a continuation (5) of an ERROR (4)
        callback(3, b"llama_kv_cache_iswa: using full-size SWA cache (ref: ...)\n", None)
        callback(4, b"llama_model_load: error loading model\n", None)
        callback(5, b"  more of the error\n", None)
    assert capfd.readouterr().err == ""
    levels = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "selfrag.llama"]
    assert levels == [
        (logging.DEBUG, "llama_kv_cache_iswa: using full-size SWA cache (ref: ...)"),
        (logging.WARNING, "llama_model_load: error loading model"),
        (logging.WARNING, "  more of the error"),
    ]


@pytest.mark.slow
def test_gemma_loads_and_answers_with_nothing_on_stderr() -> None:
    pytest.importorskip("llama_cpp")
    from selfrag_core.local.models import resolve_model

    try:
        resolve_model("gemma")
    except Exception as e:  # the model package is not installed
        pytest.skip(f"gemma is not installed: {e}")
    code = "from selfrag_core.local import make_llm; print(make_llm('gemma').generate('Say hi.').text[:20])"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "llama_" not in shown.stderr and "SWA" not in shown.stderr, shown.stderr  # it used to print one


def _refusal(status: int, body: object) -> Exception:
    openai = pytest.importorskip("openai")
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    response = httpx.Response(status, request=request, json=body)
    kind = {400: openai.BadRequestError, 422: openai.UnprocessableEntityError}.get(
        status, openai.InternalServerError
    )
    return kind(f"Error code: {status} - {body!r}", response=response, body=body)  # the client's own text


LLAMA_SERVER = {
    "error": {
        "code": 500,
        "message": 'JSON schema conversion failed:\nUnrecognized schema: {"maxLength": 600}',
        "type": "server_error",
    }
}


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (
            500,
            LLAMA_SERVER,
            'HTTP 500: JSON schema conversion failed: Unrecognized schema: {"maxLength": 600}',
        ),
        (400, {"detail": json.dumps(LLAMA_SERVER)}, "HTTP 400: JSON schema conversion failed: Unrecognized"),
        (422, {"detail": [{"loc": ["body"], "msg": "field required"}]}, "HTTP 422: field required"),
        (400, {"error": "tools are not supported"}, "HTTP 400: tools are not supported"),
    ],
)
def test_an_error_reply_is_quoted_by_its_message(status: int, body: object, said: str) -> None:
    from selfrag_core.openai_llm import _brief

    brief = _brief(_refusal(status, body))
    assert brief.startswith(said), brief
    assert "{'error'" not in brief and "\\n" not in brief


def test_the_fallback_warning_reads_as_a_sentence(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("openai")
    from selfrag_core.openai_llm import OpenAICompatibleLLM

    llm = OpenAICompatibleLLM("qwen", base_url="http://127.0.0.1:9/v1", api_key="none")
    with caplog.at_level(logging.WARNING, logger="selfrag"):
        output = llm._settle("tools", [("json_schema", _refusal(500, LLAMA_SERVER))], LLMOutput("{}"))
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.getMessage() == (
        "model 'qwen' at http://127.0.0.1:9/v1: structured output by json_schema failed (HTTP 500: JSON "
        'schema conversion failed: Unrecognized schema: {"maxLength": 600}); using tools for this server '
        "from now on"
    )
    assert output.fallbacks[0][0] == "structured_output_refused"
