"""Load benchmark of ``selfrag serve``: N concurrent requests per strategy, loopback only.

The server runs in a subprocess (uvicorn on 127.0.0.1, a free port) over the embedded
store, with a scripted LLM that takes ``--latency`` seconds per call (0.2 s by default).
For each strategy, ``--requests`` requests (50, then 200) are sent at once; the
script prints throughput, p50/p95/p99 latency, the error count, and the ideal latency
(dependent LLM rounds, read from the returned traces, x the LLM latency) with the
ratio p99 / ideal, and the server's CPU time per request (with one worker, N requests
at once cost about N x that CPU on top of the ideal; ``--workers`` spreads it over
processes, as ``selfrag serve --workers``). Target: no errors and p99
within 1.5x of the ideal up to the server's concurrency bound. Each level runs ``--runs``
times (3) on this shared machine; the run with the median p99 is printed. Bounded: at most
1000 requests per run, 9 runs, ``--time-limit`` seconds per run.

    python benchmarks/bench_serve.py [--requests 50,200] [--latency 0.2] [--strategies self,hyde]
    python benchmarks/bench_serve.py --workers 2      # selfrag serve --workers 2
    python benchmarks/bench_serve.py --keep-alive     # persistent connections, as a load balancer keeps
    python benchmarks/bench_serve.py --no-freeze      # without selfrag serve's gc.freeze() at start-up

By default each request opens its own connection (the server pays the accept and the
close every time); ``--keep-alive`` opens the N connections before the clock starts and
sends one request on each, as ``wrk -c N`` or a load balancer's pool would.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

QUESTIONS = {
    "self": "What is the capital of France?",
    "hyde": "What is the capital of France?",
    "recursive": "What are the causes and effects of the Nile floods, and how do they compare to the Seine?",
    "healing": "What is the capital of France?",
}
DOCS = [
    "Paris is the capital of France. The city lies on the river Seine.",
    "Berlin is the capital of Germany and its largest city.",
    "The Nile is the longest river in Africa and flows into the Mediterranean Sea.",
    "The Nile floods deposited fertile silt on the fields of ancient Egypt every summer.",
    "The Seine floods Paris in some winters, as in 1910, when the river rose eight metres.",
]
ANSWER = "Paris is the capital of France. The city lies on the river Seine."


# ----------------------------------------------------------------------------- server side


def build_app(latency: float, max_concurrent: int) -> Any:
    from selfrag_core.serve import ServeSettings, create_app
    from selfrag_core.store import RAG
    from selfrag_core.testing import FakeStructuredLLM

    judge = json.dumps(
        {
            "answer": ANSWER,
            **dict.fromkeys(("relevance", "accuracy", "completeness", "clarity"), 9),
            "issues": [],
            "suggestions": [],
            "items": ["What causes the Nile floods?", "What causes the Seine floods?"],
            "claims": [{"claim": ANSWER, "supported": True}],
        }
    )

    class BenchLLM(FakeStructuredLLM):
        """Plain calls answer ANSWER, JSON calls a judge/decomposition/claims object.
        Keeps no call log (a long benchmark would grow it)."""

        def _begin(self, prompt: str, is_async: bool, schema: Any) -> Any:
            return None, 0

        def _finish(self, call: Any, number: int) -> str:
            return ANSWER

        async def agenerate_structured(self, prompt: str, schema: dict[str, Any]) -> str:
            await asyncio.sleep(self.latency)
            return judge

    rag = RAG("hashing")
    rag.index_many([{"text": text, "source": f"doc{i}"} for i, text in enumerate(DOCS)])
    settings = ServeSettings(max_concurrent_queries=max_concurrent, max_llm_calls=32, query_timeout=30)
    return create_app(rag=rag, llm=BenchLLM(latency=latency), settings=settings)


def serve(port: int, latency: float, max_concurrent: int, plain: bool, workers: int, freeze: bool) -> None:
    import uvicorn

    from selfrag_core.serve.server import freeze_startup_objects

    stack: dict[str, Any] = {"loop": "asyncio", "http": "h11"} if plain else {}
    options: dict[str, Any] = {"host": "127.0.0.1", "port": port, "log_level": "warning", "backlog": 4096}
    if workers == 1:
        app = build_app(latency, max_concurrent)
        if freeze:
            freeze_startup_objects()  # as selfrag serve does once the app is built
        uvicorn.run(app, **options, **stack)
        return
    # each worker process builds the same app (the benchmark ingests nothing, so no shared index)
    os.environ["BENCH_SERVE_APP"] = json.dumps([latency, max_concurrent, freeze])
    uvicorn.run(
        "bench_serve:worker_app", factory=True, workers=workers,
        app_dir=os.path.dirname(os.path.abspath(__file__)), **options, **stack,
    )  # fmt: skip


def worker_app() -> Any:
    from selfrag_core.serve.server import freeze_startup_objects

    latency, max_concurrent, freeze = json.loads(os.environ["BENCH_SERVE_APP"])
    app = build_app(latency, max_concurrent)
    if freeze:
        freeze_startup_objects()
    return app


def core_cpu_ms(name: str, n: int = 50) -> float:
    """CPU per query of the strategy alone (no HTTP), at zero LLM latency, in this process."""
    app = build_app(0.0, 1)
    strategy = app.state.service.strategies[name]
    query = strategy.aquery if hasattr(strategy, "aquery") else strategy.ask_with_report

    async def run() -> None:
        for _ in range(n):
            json.dumps((await query(QUESTIONS[name])).to_dict())

    asyncio.run(run())  # warm up
    start = time.process_time()
    asyncio.run(run())
    return (time.process_time() - start) / n * 1000


# ----------------------------------------------------------------------------- client side


def rounds(trace: dict[str, Any]) -> int:
    """Dependent LLM rounds: groups of LLM calls that overlapped in time."""
    spans = sorted(
        (e["start_s"], e["start_s"] + e["latency_s"]) for e in trace["events"] if e["kind"] == "llm"
    )
    count, end = 0, float("-inf")
    for start, stop in spans:
        if start > end:
            count, end = count + 1, stop
        else:
            end = max(end, stop)
    return count


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def request(port: int, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
    """One HTTP/1.1 request on a fresh connection, as an independent client would send it.
    (A bare asyncio client: httpx spends more CPU per request than the server at 200 at once.)"""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    try:
        raw = await reader.read()
    finally:
        writer.close()
    status_line, _, rest = raw.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), payload


class Connection:
    """A persistent HTTP/1.1 connection (as a load balancer or ``wrk -c N`` keeps them)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, target: str, body: bytes) -> tuple[int, bytes]:
        head = (
            f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line, *headers = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        length = next(int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:"))
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def load(port: int, name: str, n: int, time_limit: float, keep_alive: bool = False) -> dict[str, Any]:
    body = json.dumps({"question": QUESTIONS[name]}).encode()
    target = f"/query/{name}"
    await request(port, "POST", target, body)  # warm up
    # with keep_alive the N connections are opened before the clock starts, as a pool would be
    pool = [await Connection.open(port) for _ in range(n)] if keep_alive else []

    async def one(i: int) -> tuple[float, int, bytes]:
        start = time.perf_counter()
        try:
            sent = pool[i].post(target, body) if pool else request(port, "POST", target, body)
            status, payload = await sent
        except (OSError, asyncio.IncompleteReadError):
            return time.perf_counter() - start, 0, b""
        return time.perf_counter() - start, status, payload

    start = time.perf_counter()
    try:
        results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(n))), time_limit)
    finally:
        for connection in pool:
            connection.close()
    wall = time.perf_counter() - start
    latencies = [r[0] for r in results]
    errors = sum(1 for r in results if r[1] != 200)
    # parsed after the run, so the client's own JSON work never delays a measured response
    dependent = statistics.mode([rounds(json.loads(r[2])["trace"]) for r in results if r[1] == 200] or [0])
    return {"wall": wall, "latencies": latencies, "errors": errors, "rounds": dependent}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the server exited during start-up")
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit("the server did not start")


def process_cpu(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its live children (the workers;
    Linux; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(process_cpu(c) for c in children)


def measure(pid: int, port: int, name: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``n`` concurrent requests: latency percentiles, errors, rounds, server CPU."""
    cpu = process_cpu(pid)
    r = asyncio.run(load(port, name, n, args.time_limit, args.keep_alive))
    lat = r["latencies"]
    return {
        **r, "p50": percentile(lat, 50), "p95": percentile(lat, 95), "p99": percentile(lat, 99),
        "cpu_ms": (process_cpu(pid) - cpu) / (n + 1) * 1000,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", default="50,200", help="concurrent requests per run (comma-separated)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per simulated LLM call")
    parser.add_argument("--strategies", default="self,hyde,recursive,healing")
    parser.add_argument("--max-concurrent", type=int, default=256, help="the server's concurrency bound")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds allowed per run")
    parser.add_argument("--runs", type=int, default=3, help="runs per level; the median-p99 run is shown")
    parser.add_argument("--plain", action="store_true", help="asyncio + h11 even if uvloop/httptools exist")
    parser.add_argument("--workers", type=int, default=1, help="server processes (selfrag serve --workers)")
    parser.add_argument(
        "--keep-alive", action="store_true", help="N persistent connections opened before the clock starts"
    )
    parser.add_argument(
        "--no-freeze", action="store_true", help="leave start-up objects to the collector (no gc.freeze)"
    )
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.latency, args.max_concurrent, args.plain, args.workers, not args.no_freeze)
        return
    levels = [int(n) for n in args.requests.split(",")]
    if max(levels) > 1000 or not 1 <= args.runs <= 9:
        raise SystemExit("--requests is capped at 1000 and --runs at 9")

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, __file__, "--serve", str(port), "--latency", str(args.latency)]
    command += ["--max-concurrent", str(args.max_concurrent), "--workers", str(args.workers)]
    command += ["--plain"] if args.plain else []
    command += ["--no-freeze"] if args.no_freeze else []
    proc = subprocess.Popen(command, env=dict(os.environ))
    try:
        wait_until_up(url, proc)
        import uvicorn

        extras = (
            "" if args.plain else ", ".join(m for m in ("uvloop", "httptools") if importlib.util.find_spec(m))
        )
        print(
            f"selfrag serve: {args.workers} uvicorn {uvicorn.__version__} worker(s) "
            f"({extras or 'asyncio, h11'}{'' if args.no_freeze else ', gc.freeze'}), "
            f"LLM latency {args.latency:.2f} s, concurrency bound {args.max_concurrent}, "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n"
            f"{args.runs} runs per level, the one with the median p99 shown, p99/ideal of all runs "
            "beside it\nideal = dependent LLM rounds x latency; cpu = server CPU per request; "
            "core = CPU per query of the strategy alone (no HTTP)\n"
        )
        header = (
            f"{'strategy':<10} {'conc':>5} {'req/s':>7} {'p50 s':>7} {'p95 s':>7} {'p99 s':>7} {'errors':>6}"
        )
        header += f" {'rounds':>6} {'ideal s':>7} {'p99/ideal':>9} {'all runs':>11}"
        print(f"{header} {'cpu ms':>7} {'core ms':>7}")
        for name in args.strategies.split(","):
            core = core_cpu_ms(name)
            for n in levels:
                runs = [measure(proc.pid, port, name, n, args) for _ in range(args.runs)]
                runs.sort(key=lambda r: r["p99"])
                r = runs[len(runs) // 2]  # the run with the median p99, printed whole
                ideal = r["rounds"] * args.latency
                ratio = f"{r['p99'] / ideal:9.2f}" if ideal else f"{'-':>9}"
                spread = f"{runs[0]['p99'] / ideal:.2f}-{runs[-1]['p99'] / ideal:.2f}" if ideal else "-"
                print(
                    f"{name:<10} {n:5d} {n / r['wall']:7.1f} {r['p50']:7.3f} {r['p95']:7.3f} {r['p99']:7.3f} "
                    f"{sum(x['errors'] for x in runs):6d} {r['rounds']:6d} {ideal:7.2f} {ratio} {spread:>11} "
                    f"{r['cpu_ms']:7.2f} {core:7.2f}"
                )
    finally:
        proc.terminate()
        proc.wait(timeout=20)


if __name__ == "__main__":
    main()
