"""Load benchmark of ``selfrag serve`` replicas: one replica against two, loopback only.

Everything is a real process on 127.0.0.1: a fake OpenAI-compatible model server
(``--latency`` seconds per completion, 0.2 s by default; JSON for structured requests,
the judge / decomposition / claims object every JSON step accepts), the shared backend,
and two ``selfrag serve --workers 1`` replicas with ``--llm openai:fake``. The backend is
a Chroma server (``chroma run``) when chromadb and its ``chroma`` executable are
installed, else the embedded index built once and copied per replica (``--backend``
chooses; the header says which). The client sends N requests at once (50, then 200),
all to one replica, then round-robin over both (a client-side balancer), and prints
throughput and p50/p99 latency side by side with the two-to-one ratios, the replicas' CPU
per request, and each replica's resident memory idle and at its peak under load.

    python benchmarks/bench_replicas.py [--requests 50,200] [--latency 0.2] [--strategies self,hyde]
    python benchmarks/bench_replicas.py --backend index    # the embedded index, one copy per replica

Two replicas give more throughput only where one replica's CPU is the bound: with a
0.2 s model most of a query is waiting, so the ratio tells how much of the work is the
replica's own (HTTP, JSON, retrieval, the strategy) on this machine's cores, which the
replicas share with the model server, the backend and this client. Each level runs
``--runs`` times (3); the run with the median p99 is printed. Never asserted on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# bench_serve is a sibling script, not a package: its directory goes on the path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import (
    ANSWER,
    DOCS,
    QUESTIONS,
    free_port,
    percentile,
    process_cpu,
    request,
)

MODEL = "fake"
USAGE = {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140}
JUDGE = {
    "answer": ANSWER,
    **dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), 9),
    "issues": [],
    "suggestions": [],
    "items": ["What causes the Nile floods?", "What causes the Seine floods?"],
    "claims": [{"claim": ANSWER, "supported": True}],
}


# ----------------------------------------------------------------------------- the fake model server


def fake_model_app(latency: float) -> Any:
    """A bare ASGI app answering ``GET /v1/models`` and ``POST /v1/chat/completions``
    after ``latency`` seconds: the judge object as JSON when the request asks for
    structured output (``response_format`` or a forced tool), else ``ANSWER``."""
    judge = json.dumps(JUDGE)

    async def send_json(send: Any, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"].endswith("/models"):
            return await send_json(send, 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw)
        await asyncio.sleep(latency)
        message_out: dict[str, Any] = {"role": "assistant", "content": ANSWER}
        if body.get("tools"):
            call = {"id": "call_1", "type": "function", "function": {"name": "reply", "arguments": judge}}
            message_out = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif body.get("response_format"):
            message_out["content"] = judge
        base = {"id": "chatcmpl-1", "created": 0, "model": body.get("model", MODEL)}
        if not body.get("stream"):
            choice = {"index": 0, "message": message_out, "finish_reason": "stop"}
            return await send_json(
                send, 200, {**base, "object": "chat.completion", "choices": [choice], "usage": USAGE}
            )
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        chunk = {**base, "object": "chat.completion.chunk"}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": {"content": ANSWER}, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**chunk, "choices": [], "usage": USAGE})
        data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": data})

    return app


def serve_fake_model(port: int, latency: float) -> None:
    import uvicorn

    app = fake_model_app(latency)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=4096, lifespan="off")


# ----------------------------------------------------------------------------- processes


def wait_ok(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited during start-up (code {proc.returncode})")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} did not answer 200 at {url} within {timeout:.0f} s")


def chroma_executable() -> str | None:
    import importlib.util

    if importlib.util.find_spec("chromadb") is None:
        return None
    local = Path(sys.executable).with_name("chroma")
    return str(local) if local.exists() else shutil.which("chroma")


def selfrag_command() -> list[str]:
    script = Path(sys.executable).with_name("selfrag")
    return [str(script)] if script.exists() else [sys.executable, "-m", "selfrag_core"]


@contextmanager
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every process started inside, terminated (then killed) on the way out."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            proc.terminate()
        for proc in reversed(started):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def backend_options(kind: str, workdir: Path, started: list[subprocess.Popen[bytes]]) -> list[list[str]]:
    """The ``selfrag serve`` backend options of each of the two replicas."""
    if kind == "chroma":
        exe = chroma_executable()
        assert exe is not None
        port = free_port()
        log = (workdir / "chroma.log").open("wb")
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        command = [exe, "run", "--path", str(workdir / "chroma"), "--host", "127.0.0.1", "--port", str(port)]
        started.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
        wait_ok(f"http://127.0.0.1:{port}/api/v2/heartbeat", started[-1], "chroma run")
        spec = ["--backend", f"chroma://127.0.0.1:{port}/bench", "--embedder", "hashing"]
        return [spec, spec]
    from selfrag_core.store import RAG

    rag = RAG("hashing")
    rag.index_many([{"text": text, "source": f"doc{i}"} for i, text in enumerate(DOCS)])
    rag.save(workdir / "index-1")
    shutil.copytree(workdir / "index-1", workdir / "index-2")
    return [["--index", str(workdir / f"index-{i}"), "--embedder", "hashing"] for i in (1, 2)]


def rss_mb(pid: int) -> float:
    try:
        import psutil

        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except ImportError:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


class PeakRSS:
    """The largest RSS of each pid, sampled every 50 ms while the block runs."""

    def __init__(self, pids: list[int]) -> None:
        self.pids, self.peak = pids, dict.fromkeys(pids, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            for pid in self.pids:
                self.peak[pid] = max(self.peak[pid], rss_mb(pid))

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()


# ----------------------------------------------------------------------------- load


async def load(ports: list[int], name: str, n: int, time_limit: float) -> dict[str, Any]:
    """``n`` requests at once, request i to ``ports[i % len(ports)]`` (round robin)."""
    body = json.dumps({"question": QUESTIONS[name]}).encode()
    target = f"/query/{name}"
    for port in ports:
        await request(port, "POST", target, body)  # warm up each replica

    async def one(i: int) -> tuple[float, int]:
        start = time.perf_counter()
        try:
            status, _ = await request(ports[i % len(ports)], "POST", target, body)
        except (OSError, asyncio.IncompleteReadError):
            status = 0
        return time.perf_counter() - start, status

    start = time.perf_counter()
    results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), time_limit)
    wall = time.perf_counter() - start
    latencies = [r[0] for r in results]
    return {
        "wall": wall, "rps": n / wall, "p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
        "errors": sum(1 for r in results if r[1] != 200),
    }  # fmt: skip


def measure(ports: list[int], pids: list[int], name: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    for _ in range(args.runs):
        cpu = sum(process_cpu(p) for p in pids)
        with PeakRSS(pids) as peak:
            r = asyncio.run(load(ports, name, n, args.time_limit))
        warm = len(ports)  # the warm-up requests are counted in the CPU too
        r["cpu_ms"] = (sum(process_cpu(p) for p in pids) - cpu) / (n + warm) * 1000
        args.sent += n + warm
        r["peak_mb"] = max(peak.peak.values())
        runs.append(r)
    runs.sort(key=lambda r: r["p99"])
    median = dict(runs[len(runs) // 2])
    median["errors"] = sum(r["errors"] for r in runs)
    return median


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", default="50,200", help="concurrent requests per run (comma-separated)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per fake model completion")
    parser.add_argument(
        "--strategies", default="self", help="comma-separated: self, hyde, recursive, healing"
    )
    parser.add_argument("--backend", choices=["auto", "chroma", "index"], default="auto")
    parser.add_argument("--runs", type=int, default=3, help="runs per level; the median-p99 run is shown")
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds allowed per run")
    parser.add_argument("--fake-model", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_model:
        serve_fake_model(args.fake_model, args.latency)
        return
    levels = [int(n) for n in args.requests.split(",")]
    if max(levels) > 1000 or not 1 <= args.runs <= 9:
        raise SystemExit("--requests is capped at 1000 and --runs at 9")
    kind = args.backend
    if kind == "auto":
        kind = "chroma" if chroma_executable() else "index"
    elif kind == "chroma" and chroma_executable() is None:
        raise SystemExit(
            "--backend chroma needs chromadb and its chroma executable: pip install 'selfrag[chroma]'"
        )

    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp, processes() as started:
        workdir = Path(tmp)
        model_port = free_port()
        fake = [sys.executable, __file__, "--fake-model", str(model_port), "--latency", str(args.latency)]
        started.append(subprocess.Popen(fake))
        wait_ok(f"http://127.0.0.1:{model_port}/v1/models", started[-1], "the fake model server")
        backends = backend_options(kind, workdir, started)
        ports = [free_port(), free_port()]
        replicas: list[subprocess.Popen[bytes]] = []
        for port, backend in zip(ports, backends, strict=True):
            command = [
                *selfrag_command(), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                "--llm", f"openai:{MODEL}", "--llm-base-url", f"http://127.0.0.1:{model_port}/v1",
                "--max-concurrent", "1024", "--timeout", "60", "--log-level", "warning", *backend,
            ]  # fmt: skip
            replicas.append(subprocess.Popen(command, env={**os.environ, "OPENAI_API_KEY": "not-needed"}))
            started.append(replicas[-1])
        for port, proc in zip(ports, replicas, strict=True):
            wait_ok(f"http://127.0.0.1:{port}/readyz", proc, f"the replica on port {port}")
        if kind == "chroma":  # the shared collection, written once through the first replica
            docs = [{"text": text, "source": f"doc{i}"} for i, text in enumerate(DOCS)]
            status, _ = asyncio.run(
                request(ports[0], "POST", "/documents", json.dumps({"documents": docs}).encode())
            )
            assert status == 200, status
        pids = [p.pid for p in replicas]
        idle = [rss_mb(pid) for pid in pids]
        services = {
            "fake model server": started[0].pid,
            **({"Chroma": started[1].pid} if kind == "chroma" else {}),
        }
        start_cpu = {name: process_cpu(pid) for name, pid in services.items()}
        start_cpu["replicas"] = sum(process_cpu(p) for p in pids)
        args.sent = 0
        print(
            f"selfrag serve replicas (--workers 1 each) over a fake OpenAI-compatible model server "
            f"({args.latency:.2f} s per completion), backend: "
            f"{'a Chroma server, shared' if kind == 'chroma' else 'the embedded index, copied per replica'}; "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n"
            f"{args.runs} runs per level, the one with the median p99 shown; two replicas = client-side "
            "round robin; cpu = replicas' CPU per request; peak = largest replica RSS during the run\n"
            f"replica RSS idle: {', '.join(f'{mb:.0f} MB' for mb in idle)}\n"
        )
        one = f"{'req/s':>7} {'p50 s':>6} {'p99 s':>6} {'err':>4} {'cpu ms':>6} {'peak MB':>7}"
        print(f"{'':<16} {'1 replica':^42}   {'2 replicas':^42}   {'2 / 1':^13}")
        print(f"{'strategy':<10} {'conc':>5} {one}   {one}   {'req/s':>6} {'p99':>6}")
        for name in args.strategies.split(","):
            for n in levels:
                single = measure(ports[:1], pids[:1], name, n, args)
                double = measure(ports, pids, name, n, args)
                cells = [
                    f"{r['rps']:7.1f} {r['p50']:6.3f} {r['p99']:6.3f} {r['errors']:4d} "
                    f"{r['cpu_ms']:6.1f} {r['peak_mb']:7.0f}"
                    for r in (single, double)
                ]
                print(
                    f"{name:<10} {n:5d} {cells[0]}   {cells[1]}   "
                    f"{double['rps'] / single['rps']:6.2f} {double['p99'] / single['p99']:6.2f}"
                )
        print(f"\nreplica RSS after the runs: {', '.join(f'{rss_mb(pid):.0f} MB' for pid in pids)}")
        used = {name: process_cpu(pid) - start_cpu[name] for name, pid in services.items()}
        used["replicas"] = sum(process_cpu(p) for p in pids) - start_cpu["replicas"]
        print(
            f"CPU per request over all {args.sent} requests: "
            + ", ".join(f"{name} {seconds / args.sent * 1000:.1f} ms" for name, seconds in used.items())
            + "; "
            + ", ".join(f"{name} RSS {rss_mb(pid):.0f} MB" for name, pid in services.items())
        )


if __name__ == "__main__":
    main()
