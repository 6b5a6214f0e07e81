"""A real Chroma server for the backend tests: ``chroma run`` on loopback, as the
LangChain adapter's tests start it (integrations/langchain/tests/conftest.py); skipped
cleanly when chromadb or its ``chroma`` executable is not installed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chroma_executable() -> str | None:
    local = Path(sys.executable).with_name("chroma")
    return str(local) if local.exists() else shutil.which("chroma")


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(host, port) of a Chroma server started for the session and killed at its end.
    Chroma's default ONNX embedding function is made to fail if anything calls it:
    every vector must come from the backend's embedder."""
    pytest.importorskip("chromadb", reason="pip install 'selfrag[chroma]'")
    exe = _chroma_executable()
    if exe is None:
        pytest.skip("the chroma server executable is not installed (pip install 'selfrag[chroma]')")
    from chromadb.utils.embedding_functions import onnx_mini_lm_l6_v2

    def no_download(self: Any) -> None:
        raise AssertionError("a test tried to download Chroma's default ONNX embedding model")

    onnx_mini_lm_l6_v2.ONNXMiniLM_L6_V2._download_model_if_not_exists = no_download  # type: ignore[method-assign]

    path, port = tmp_path_factory.mktemp("chroma"), _free_port()
    log = (path / "server.log").open("w")
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    server = subprocess.Popen(
        [exe, "run", "--path", str(path / "data"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # HttpClient() itself needs a live server: wait on the heartbeat first
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chroma server did not start; see {path / 'server.log'}") from None
                time.sleep(0.2)
        yield "127.0.0.1", port
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture
def chroma_url(chroma_server: tuple[str, int], request: pytest.FixtureRequest) -> str:
    """A ``chroma://`` URL of a collection of its own for each test."""
    host, port = chroma_server
    name = "t-" + "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[-40:].strip("-")
    return f"chroma://{host}:{port}/{name}0"
