"""Our strategies as scenarios of the peer benchmark (``../shared/bench/peers``).

Runs beside LlamaIndex and LangChain on identical work: the same SimulatedLLM,
the same 200-document corpus and hashed embeddings, top_k = 5::

    PYTHONPATH=/work/main/benchmarks:/work/main <peers-venv>/bin/python \\
        /work/shared/bench/peers/run.py --extra peers_ours --out /tmp/peers.json
    python benchmarks/peers_ours.py /tmp/peers.json     # ratios ours / peers

Our default prompts already hit the simulator's patterns ("SUBQUESTIONS:" for
decomposition, "Write a passage" for HyDE); only the self-healing judge is
replaced by a YES/NO metric (the simulator's evaluator) passed as ``metric=``,
which is how users plug in their own metric too. SelfIRAG's judge speaks JSON:
``JudgeAdapter`` hands its judge prompts to the simulator's evaluator as the harness's
``seeds`` module does for the original SelfIRAG (the same "YES/NO" prefix, the same
low-then-high scores), so both run the same loop.

Equivalents: 0 = the plain baselines (top 5, one answer; our PlainRAG); A = LlamaIndex
SubQuestionQueryEngine (one level of 4 sub-questions: our RecursiveRAG with
max_depth=1); B = LlamaIndex HyDE (1 passage) and LCEL HyDE (3 passages); C =
LlamaIndex RetryQueryEngine (answer, judge NO, retry, judge YES: our SelfHealingRAG
over two strategies), and the original SelfIRAG (``seeds``: judge low, refine, judge
high) in fast mode and two-step, with the grounding checks off so that the judge alone
decides, as in the original. ``benchmarks/prompt_sizes.py`` prints the prompt sizes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

from selfrag_core import (
    FaithfulnessScore,
    GroundingConfig,
    HyDERAG,
    PlainRAG,
    RecursiveRAG,
    RecursiveRAGConfig,
    SelfHealingRAG,
    SelfIRAG,
    SelfRAGConfig,
)
from selfrag_core.engine import Generate, Plan

_STATE: dict[str, Any] = {}

# the harness modules (on sys.path when run by run.py)
try:
    import corpus
    import seeds  # the original systems' adapter: its judge scores (no seed package needed)
    from scenarios import COMPARE_Q, SINGLE_Q, Scenario
except ImportError:  # imported for the ratio printer only
    corpus = None


class HashBackend:
    """numpy top-k over the harness's hashed embeddings (the peers' retrieval work)."""

    score_kind = "similarity"

    def retrieve(self, query: str, top_k: int = 5) -> list[tuple[str, float]]:
        scores = _STATE["M"] @ np.array(corpus.hash_embed(query))
        idx = np.argsort(-scores, kind="stable")[:top_k]
        return [(corpus.CORPUS[i]["text"], float(scores[i])) for i in idx]


class YesNoMetric:
    """A one-call judge in the simulator's YES/NO format, as a plan-producing metric."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def plan(self, question: str, answer: str, contexts: list[str]) -> Plan[FaithfulnessScore]:
        prompt = (
            "Is the answer supported by the context? Reply YES/NO.\n\nContext:\n"
            + "\n\n".join(contexts)
            + f"\n\nQuestion: {question}\nAnswer: {answer}"
        )
        reply = yield Generate(self.llm, prompt, "metric", 0)
        return FaithfulnessScore(1.0 if reply.text.strip().upper().startswith("YES") else 0.0)


class JudgeAdapter:
    """The simulator behind SelfIRAG's JSON judge: a judge prompt goes to the simulator
    with the evaluator's "YES/NO" prefix, and its NO / YES comes back as the low / high
    scores that ``seeds.Responder`` gives the original SelfIRAG; other prompts pass."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def _route(self, prompt: str) -> tuple[str, Any]:
        if '"relevance"' not in prompt:  # not a judge prompt
            return prompt, None

        def scores(verdict: str) -> dict[str, Any]:
            return seeds._EVAL_HIGH if verdict.startswith("YES") else seeds._EVAL_LOW

        if '"answer"' in prompt:  # answer_and_evaluate: the answer inside the judge's JSON
            answer = seeds._answer_text(seeds._after("Question:", prompt))
            return "Self-evaluation, reply YES/NO.\n" + prompt, lambda v: json.dumps(
                {"answer": answer, **scores(v)}
            )
        return "Self-evaluation, reply YES/NO.\n" + prompt, lambda v: json.dumps(scores(v))

    def generate(self, prompt: str) -> str:
        sent, post = self._route(prompt)
        reply = self.sim.generate(sent)
        return post(reply) if post else reply

    async def agenerate(self, prompt: str) -> str:
        sent, post = self._route(prompt)
        reply = await self.sim.agenerate(sent)
        return post(reply) if post else reply


def setup(ctx: dict[str, Any]) -> None:
    _STATE["M"] = np.array([corpus.hash_embed(d["text"]) for d in corpus.CORPUS])


def _builder(make: Any, queries: list[str], mode: str) -> Any:
    def build(ctx: dict[str, Any]) -> Any:
        ask = make(ctx["sim"])
        if mode == "sync":
            return lambda i: ask.sync(queries[i % len(queries)])

        async def arun(i: int) -> Any:
            return await ask.run_async(queries[i % len(queries)])

        return arun

    return build


class _Ask:
    def __init__(self, sync: Any, run_async: Any) -> None:
        self.sync, self.run_async = sync, run_async


def _plain(sim: Any) -> _Ask:
    rag = PlainRAG(HashBackend(), sim)
    return _Ask(rag.query, rag.aquery)


def _self(fast: bool) -> Any:
    def make(sim: Any) -> _Ask:
        config = SelfRAGConfig(fast_mode=fast, grounding=GroundingConfig(enabled=False))
        rag = SelfIRAG(HashBackend(), JudgeAdapter(sim), config)
        return _Ask(rag.query, rag.aquery)

    return make


def _recursive(sim: Any) -> _Ask:
    rag = RecursiveRAG(HashBackend(), sim, RecursiveRAGConfig(max_depth=1))
    return _Ask(rag.query, rag.aquery)


def _hyde(n: int) -> Any:
    def make(sim: Any) -> _Ask:
        rag = HyDERAG(HashBackend(), sim, num_hypothetical_docs=n)
        return _Ask(rag.query, rag.aquery)

    return make


def _heal(sim: Any) -> _Ask:
    rag = SelfHealingRAG(sim, [HashBackend(), HashBackend()], metric=YesNoMetric(sim))
    return _Ask(rag.ask_sync, rag.ask)


def _scenarios() -> list[Any]:
    if corpus is None:
        return []
    specs = [
        ("0.ours.plain", "0", "PlainRAG (top 5, one answer)", _plain, SINGLE_Q, 1, 1),
        ("A.ours.recursive", "A", "RecursiveRAG max_depth=1 (4 sub-questions)", _recursive, COMPARE_Q, 6, 3),
        ("B.ours.hyde1", "B", "HyDERAG, 1 passage", _hyde(1), SINGLE_Q, 2, 2),
        ("B.ours.hyde3", "B", "HyDERAG, 3 passages", _hyde(3), SINGLE_Q, 4, 2),
        ("C.ours.heal", "C", "SelfHealingRAG, 2 strategies, YES/NO judge", _heal, SINGLE_Q, 4, 4),
        ("C.ours.selfrag.fast", "C", "SelfIRAG fast mode", _self(True), SINGLE_Q, 3, 3),
        ("C.ours.selfrag.slow", "C", "SelfIRAG two-step", _self(False), SINGLE_Q, 4, 4),
    ]
    return [
        Scenario(f"{sid}.{mode}", fam, "ours", title, mode, _builder(make, qs, mode), calls, rounds)
        for sid, fam, title, make, qs, calls, rounds in specs
        for mode in ("sync", "async")
    ]


SCENARIOS = _scenarios()
CONCURRENCY = [
    ("A.ours.recursive.async", 32),
    ("B.ours.hyde1.async", 8),
    ("B.ours.hyde3.async", 8),
    ("C.ours.heal.async", 8),
    ("C.ours.selfrag.fast.async", 8),
]

# ours -> the peer scenarios doing the same work
PAIRS = {
    "0.ours.plain.sync": ["0.lc.plain.sync", "0.li.plain.sync"],
    "0.ours.plain.async": ["0.lc.plain.async", "0.li.plain.async"],
    "A.ours.recursive.sync": ["A.li.subq.sync_async", "A.li.subq.sync_noasync"],
    "A.ours.recursive.async": ["A.li.subq.aquery"],
    "B.ours.hyde1.sync": ["B.li.hyde.sync", "B.lc.hde.sync"],
    "B.ours.hyde1.async": ["B.li.hyde.async", "B.lc.hde.async"],
    "B.ours.hyde3.sync": ["B.lc.hyde3.sync"],
    "B.ours.hyde3.async": ["B.lc.hyde3.async"],
    "C.ours.heal.sync": ["C.li.retry.sync"],
    "C.ours.heal.async": ["C.li.retry.async"],
    "C.ours.selfrag.fast.sync": ["F.fen.selfrag.fast.sync"],
    "C.ours.selfrag.fast.async": ["F.fen.selfrag.fast.async"],
    "C.ours.selfrag.slow.sync": ["F.fen.selfrag.slow.sync"],
}


def print_ratios(path: str) -> None:
    """Ours / peer, from one run of the harness: latency-bound wall time, overhead over
    rounds x latency, CPU at latency 0, and the concurrency probes."""
    with open(path) as f:
        out = json.load(f)
    seq = {r["id"]: r for r in out["scenarios"] if "error" not in r}
    ovh = {r["id"]: r for r in out["overhead"] if "error" not in r and "concurrency" not in r}
    conc = {r["base"]: r for r in out["concurrency"] if "error" not in r}
    print(f"{'ours':24} {'peer':26} {'wall':>11} {'ovh ms':>13} {'cpu ms (lat 0)':>17}")
    for ours, peers in PAIRS.items():
        for peer in peers:
            if ours not in seq or peer not in seq:
                continue
            a, b = seq[ours], seq[peer]
            wa, wb = a["wall_s"]["median"], b["wall_s"]["median"]
            oa, ob = (a.get("overhead_s") or 0) * 1000, (b.get("overhead_s") or 0) * 1000
            ca = ovh.get(ours, {}).get("cpu_ms", {}).get("median")
            cb = ovh.get(peer, {}).get("cpu_ms", {}).get("median")
            cpu = f"{ca:.1f}/{cb:.1f}={ca / cb:.2f}" if ca and cb else "-"
            print(f"{ours:24} {peer:26} {wa / wb:10.2f}x {oa:5.1f}/{ob:5.1f}  {cpu:>17}")
    print(f"\n{'concurrency probe':30} {'wall s':>7} {'speed-up':>9}")
    for _, r in sorted(conc.items()):
        speed = r.get("speedup_vs_serial")
        print(f"{r['id']:30} {r['wall_s']['median']:7.3f} {speed or 0:8.1f}x")


if __name__ == "__main__":
    print_ratios(sys.argv[1] if len(sys.argv) > 1 else "/tmp/peers.json")
