"""``python -m selfrag_core.serve``: the real entry point, in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(command: list[str], token: str = "") -> tuple[subprocess.Popen[bytes], str]:
    """``python -m selfrag_core.serve`` with ``command``'s options, once it answers /healthz."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "selfrag_core.serve", *command, "--port", str(port), "--log-level", "warning"],
        env={**{k: v for k, v in os.environ.items() if k != "SELFRAG_API_TOKEN"},
             **({"SELFRAG_API_TOKEN": token} if token else {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.2)


def test_module_entry_point_serves_and_persists(tmp_path: Path) -> None:
    pytest.importorskip("bm25s")
    index_dir = tmp_path / "index"
    proc, url = _start(["--llm", "fake", "--index", str(index_dir)], token="tok")
    try:
        auth = {"Authorization": "Bearer tok"}
        with httpx.Client(base_url=url, headers=auth, timeout=30) as c:
            assert c.get("/stats", headers={"Authorization": "Bearer no"}).status_code == 401
            doc = {"text": "Oslo is the capital of Norway.", "source": "norway.txt"}
            assert c.post("/documents", json=doc).json()["persisted"] is True
            for name in ("self", "hyde", "recursive", "healing"):
                answer = c.get(f"/query/{name}", params={"q": "What is the capital of Norway?"})
                assert answer.status_code == 200, answer.text
                assert "Oslo" in answer.json()["answer"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    from selfrag_core.presets import open_index  # reopens with the embedder the index was built with

    assert "norway.txt" in open_index(index_dir, create=False).sources()


def test_workers_share_the_index_and_lose_no_write(tmp_path: Path) -> None:
    pytest.importorskip("bm25s")
    index_dir = tmp_path / "index"
    proc, url = _start(["--llm", "fake", "--workers", "2", "--index", str(index_dir)])
    cities = [f"City{i}" for i in range(12)]

    def add(city: str) -> int:  # a new connection each: the kernel spreads them over the workers
        doc = {"text": f"{city} is a harbour town on the coast.", "source": f"{city}.txt"}
        return httpx.post(f"{url}/documents", json=doc, timeout=30).status_code

    def stats(_: int) -> dict[str, Any]:
        return dict(httpx.get(f"{url}/stats", timeout=30).json())

    try:
        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(add, cities)) == {200}
            seen = [s for _ in range(10) for s in pool.map(stats, range(20))]
        assert len({s["worker"] for s in seen}) == 2  # both workers answered ...
        assert {s["documents"] for s in seen} == {len(cities)}  # ... and each had every document
        answer = httpx.get(f"{url}/query/self", params={"q": "Which town is City7?"}, timeout=30).json()
        assert any(d["metadata"].get("source") == "City7.txt" for d in answer["sources"])
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    from selfrag_core.presets import open_index

    assert set(open_index(index_dir, create=False).sources()) == {f"{c}.txt" for c in cities}


def test_workers_need_a_shared_index_directory() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "selfrag_core.serve", "--llm", "fake", "--workers", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--workers above 1 needs --index DIR" in done.stderr


def test_the_cli_side_imports_no_framework() -> None:
    code = (
        "import sys, argparse, selfrag_core, selfrag_core.serve.server as s; "
        "s.add_arguments(argparse.ArgumentParser()); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'starlette')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_arguments_alone_and_beside_a_cli_parser() -> None:
    import argparse

    from selfrag_core.serve.server import add_arguments, settings_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--index", "idx", "--cors-origin", "https://a", "--cors-origin", "https://b"])
    settings = settings_from_args(args)
    assert (args.index, args.llm, args.port) == ("idx", "local", 8000)
    assert settings.index_dir == "idx" and settings.cors_origins == ("https://a", "https://b")

    cli = argparse.ArgumentParser()  # a CLI that already has --index, --llm and --max-llm-calls
    cli.add_argument("--index")
    cli.add_argument("--llm", default="local")
    cli.add_argument("--max-llm-calls", type=int, default=12)
    add_arguments(cli, shared=False)
    args = cli.parse_args(["--max-concurrent", "3", "--timeout", "5", "--port", "9000"])
    settings = settings_from_args(args, index_dir="/data/index")
    assert (settings.max_concurrent_queries, settings.query_timeout, settings.max_llm_calls) == (3, 5.0, 12)
    assert settings.index_dir == "/data/index" and args.port == 9000


def test_the_server_freezes_its_start_up_objects_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from selfrag_core.serve import server

    seen: dict[str, Any] = {}

    class Uvicorn:  # records what the collector tracks when serving starts
        @staticmethod
        def run(app: Any, **options: Any) -> None:
            seen["frozen"], seen["app"] = gc.get_freeze_count(), app

    monkeypatch.setattr(server, "_uvicorn", lambda: Uvicorn)
    app = object()
    try:
        assert gc.get_freeze_count() == 0
        server.serve_forever(app, "127.0.0.1", 0)
        assert seen["app"] is app and seen["frozen"] > 1000  # modules, app and index are exempt
    finally:
        gc.unfreeze()


def test_workers_build_their_app_with_the_callers_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server names no caller: ``selfrag serve --workers N`` passes the CLI's own builder."""
    import argparse
    import json
    from types import SimpleNamespace

    from selfrag_core.cli import commands
    from selfrag_core.errors import ConfigurationError
    from selfrag_core.serve import server

    args = argparse.Namespace(index="idx", host="127.0.0.1", port=1, log_level="warning")
    for bad in ("selfrag_core.cli", "selfrag_core.cli.commands:no_such_builder", "no_such_module_xyz:build"):
        with pytest.raises(ConfigurationError, match="app builder"):
            server.serve_workers(bad, args, 2)
    started: dict[str, Any] = {}
    monkeypatch.setenv(server.WORKER_ENV, "")  # restored afterwards
    monkeypatch.setattr(server, "_uvicorn", lambda: SimpleNamespace(run=lambda app, **kw: started.update(kw)))
    server.serve_workers("selfrag_core.cli.commands:serve_app", args, 2)
    assert started["workers"] == 2 and started["factory"] is True
    assert json.loads(os.environ[server.WORKER_ENV])["builder"] == "selfrag_core.cli.commands:serve_app"
    monkeypatch.setattr(commands, "serve_app", lambda parsed: ("app", parsed.index))
    monkeypatch.setattr(server, "freeze_startup_objects", lambda: None)
    assert server.worker_app() == ("app", "idx")
