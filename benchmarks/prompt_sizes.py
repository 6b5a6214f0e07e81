"""What a user pays per query: the prompt characters and tokens our strategies send,
beside the peers' (LlamaIndex, LangChain) and the original systems' doing the same work,
all from ONE run of the peer harness (``../shared/bench/peers``, see its README)::

    # one run: the peers, the originals (the harness's seeds module, when its packages
    # are installed: see seeds.py's docstring) and ours (peers_ours), each scenario's
    # prompt tokens counted from the prompts it sent; other arguments go to run.py
    <venv>/bin/python benchmarks/prompt_sizes.py run --out /tmp/peers.json
    <venv>/bin/python benchmarks/prompt_sizes.py run --out /tmp/peers.json --runs 3 --skip-overhead
    python benchmarks/prompt_sizes.py /tmp/peers.json      # the table again, from that file

The harness records ``prompt_chars`` per query (every call's prompt, the median over the
timed runs). ``run`` adds ``prompt_tokens`` beside it, counted with tiktoken's
``cl100k_base`` from the same prompts (the encoding is read from tiktoken's cache, or from
the copy LlamaIndex ships, so nothing is downloaded); without tiktoken the table shows
characters / 4 as tokens, marked ``~``. The prompts of the original systems carry the
harness's routing prefix (e.g. "Self-evaluation, reply YES/NO." before a judge prompt,
31 characters); so do our SelfIRAG judge prompts (``peers_ours.JudgeAdapter``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = Path(os.environ.get("PEERS_DIR", HERE.parent.parent / "shared" / "bench" / "peers"))

#: scenario, our scenario id, the others doing the same work (id, name)
ROWS: list[tuple[str, str, list[tuple[str, str]]]] = [
    (
        "plain",
        "0.ours.plain.sync",
        [
            ("0.lc.plain.sync", "LangChain LCEL"),
            ("0.li.plain.sync", "LlamaIndex query engine"),
            ("F.syn.plain.sync", "original SynapseKit RAG"),
            ("F.ffai.query.sync", "original ffai RAG"),
        ],
    ),
    (
        "HyDE, 1 passage",
        "B.ours.hyde1.sync",
        [("B.lc.hde.sync", "LangChain HyDE"), ("B.li.hyde.sync", "LlamaIndex HyDE")],
    ),
    (
        "HyDE, 3 passages",
        "B.ours.hyde3.sync",
        [("B.lc.hyde3.sync", "LCEL HyDE"), ("F.fen.hyde3.sync", "original HyDERAG")],
    ),
    (
        "4-way decomposition",
        "A.ours.recursive.sync",
        [
            ("A.li.subq.sync_async", "LlamaIndex SubQuestion"),
            ("F.fen.recursive.sync", "original RecursiveRAG"),
        ],
    ),
    ("self-refine, fast mode", "C.ours.selfrag.fast.sync", [("F.fen.selfrag.fast.sync", "original")]),
    ("self-refine, two-step", "C.ours.selfrag.slow.sync", [("F.fen.selfrag.slow.sync", "original")]),
    (
        "retry after a failed check",
        "C.ours.heal.sync",
        [("C.li.retry.sync", "LlamaIndex RetryQueryEngine")],
    ),
]


# ------------------------------------------------------------------ counting tokens
def cl100k() -> Callable[[str], int] | None:
    """Token counter of tiktoken's cl100k_base, or None (no tiktoken, or no copy of the
    encoding on this machine). Uses LlamaIndex's shipped cache when none is configured."""
    try:
        import tiktoken
    except ImportError:
        return None
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        spec = importlib.util.find_spec("llama_index.core")
        if spec is not None and spec.origin:
            shipped = Path(spec.origin).parent / "_static" / "tiktoken_cache"
            if shipped.is_dir():
                os.environ["TIKTOKEN_CACHE_DIR"] = str(shipped)
    try:
        encoding = tiktoken.get_encoding("cl100k_base")
    except Exception:  # not cached and no network
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def counting(bench_sequential: Callable[..., dict[str, Any]], count: Callable[[str], int] | None) -> Any:
    """``run.bench_sequential`` that also keeps the prompts the simulated LLM classified in
    each run (a ``sim.reset()`` starts a run; the first is the untimed warm-up) and adds
    ``prompt_tokens`` (the median over the timed runs) and ``prompt_calls`` (each call's
    characters and tokens in the first timed run) to the scenario's record. Only a
    reference is kept per call while timing; tokens are counted after the scenario."""

    def bench(sc: Any, ctx: Any, sim: Any, runner: Any, runs: int) -> dict[str, Any]:
        seen: list[list[str]] = []
        classify, reset = sim.classify, sim.reset

        def keep(prompt: str) -> str:
            seen[-1].append(prompt)
            return classify(prompt)

        def new_run() -> None:
            seen.append([])
            reset()

        sim.classify, sim.reset = keep, new_run
        try:
            rec = bench_sequential(sc, ctx, sim, runner, runs)
        finally:
            del sim.classify, sim.reset
        timed = seen[1:]
        if "error" in rec or not timed:
            return rec
        size = count or (lambda text: round(len(text) / 4))
        chars = int(statistics.median(sum(map(len, run)) for run in timed))
        if chars != rec.get("prompt_chars"):
            rec["prompt_chars_seen"] = chars  # should not happen: every call is classified once
        rec["prompt_tokens"] = int(statistics.median(sum(map(size, run)) for run in timed))
        rec["prompt_tokens_by"] = "cl100k_base" if count else "chars/4"
        rec["prompt_calls"] = [[len(p), size(p)] for p in timed[0]]
        return rec

    return bench


def run_harness(args: list[str]) -> int:
    """One run of the harness with our scenarios (and the originals' when installed)."""
    sys.path[:0] = [str(PEERS), str(HERE), str(HERE.parent)]
    import run  # the harness's run.py

    count = cl100k()
    if count is None:
        print("tiktoken's cl100k_base is not available: tokens are characters / 4", file=sys.stderr)
    run.bench_sequential = counting(run.bench_sequential, count)
    extras = ["--extra", "peers_ours"]
    if importlib.util.find_spec("fennec_community") is not None:
        extras += ["--extra", "seeds"]
    else:
        print("the original systems are not installed (see seeds.py): no originals", file=sys.stderr)
    code: int = run.main(extras + args)
    out = args[args.index("--out") + 1] if "--out" in args else str(PEERS / "results" / "peers.json")
    print()
    print_table(out)
    return code


# ------------------------------------------------------------------ the table
def _size(rec: dict[str, Any]) -> tuple[int, int, str]:
    chars = int(rec["prompt_chars"])
    tokens = rec.get("prompt_tokens")
    if tokens is None:
        return chars, round(chars / 4), "~"
    return chars, int(tokens), "~" if rec.get("prompt_tokens_by") != "cl100k_base" else ""


def _cell(name: str, rec: dict[str, Any]) -> str:
    chars, tokens, approx = _size(rec)
    return f"{name} {chars:,} ({approx}{tokens:,})".strip()


def table(out: dict[str, Any]) -> list[list[str]]:
    """Rows of scenario, ours, shortest other (and the shortest in characters when another
    one), ratio chars (tokens). A scenario missing from the run is left out."""
    by_id = {r["id"]: r for r in out["scenarios"] if "error" not in r and "prompt_chars" in r}
    rows = []
    for label, ours_id, others in ROWS:
        ours = by_id.get(ours_id)
        present = [(name, by_id[i]) for i, name in others if i in by_id]
        if ours is None or not present:
            continue
        by_tokens = min(present, key=lambda p: (_size(p[1])[1], _size(p[1])[0]))
        by_chars = min(present, key=lambda p: (_size(p[1])[0], _size(p[1])[1]))
        shortest = _cell(*by_tokens)
        if by_chars is not by_tokens:
            shortest += "; " + _cell(*by_chars)
        (c, t, _), (oc, ot, _) = _size(ours), _size(by_tokens[1])
        rows.append([label, _cell("", ours), shortest, f"{c / oc:.2f} ({t / ot:.2f})"])
    return rows


def print_table(path: str) -> None:
    with open(path) as f:
        out = json.load(f)
    rows = table(out)
    print("| scenario | ours | shortest other | ratio |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    missing = [ours for _, ours, _ in ROWS if ours not in {r["id"] for r in out["scenarios"]}]
    if missing:
        print(f"\nnot in this run: {', '.join(missing)}")
    calls = {r["id"]: r.get("prompt_calls") for r in out["scenarios"] if r.get("prompt_calls")}
    if calls:
        print("\nper call (characters, tokens), first timed run:")
        for _, ours_id, others in ROWS:
            for sid in [ours_id] + [i for i, _ in others]:
                if sid in calls:
                    print(f"  {sid:26} " + " ".join(f"{c}({t})" for c, t in calls[sid]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        sys.exit(run_harness(sys.argv[2:]))
    print_table(sys.argv[1] if len(sys.argv) > 1 else "/tmp/peers.json")
