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
from lc_fakes import RunTree


@pytest.fixture
def run_tree() -> RunTree:
    return RunTree()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chroma_executable() -> str | None:
    local = Path(sys.executable).with_name("chroma")
    return str(local) if local.exists() else shutil.which("chroma")


@pytest.fixture(scope="session")
def chroma_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Chroma server (`chroma run` on loopback) and an HttpClient to it; the
    server is killed at the end of the session."""
    chromadb = pytest.importorskip("chromadb", reason="pip install 'selfrag-langchain[chroma]'")
    pytest.importorskip("langchain_chroma", reason="pip install 'selfrag-langchain[chroma]'")
    exe = _chroma_executable()
    if exe is None:
        pytest.skip("the chroma server executable is not installed (pip install chromadb)")
    from chromadb.config import Settings
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
        client = chromadb.HttpClient(
            host="127.0.0.1", port=port, settings=Settings(anonymized_telemetry=False)
        )
        yield client
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
