"""``selfrag eval``: the strategies against a plain retrieve-and-answer, ``--dry-run``,
``--fit-router``, ``--fit-verifier``."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from selfrag_core.cli.commands import _generation_options, _llm, _routing, _verifier
from selfrag_core.cli.files import CLIError, _external_backend, _open_external, default_index_dir
from selfrag_core.parsing import load_json
from selfrag_core.presets import preset_for
from selfrag_core.progress import Progress


def _cache_home() -> Path:
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser()
    return Path.home() / ".cache"


def cmd_eval(args: argparse.Namespace) -> int:
    """``selfrag eval``: the contenders on the questions, the report printed and written, the
    router fitted (``--fit-router``), the support check refitted (``--fit-verifier``), then the
    gate against ``--baseline``: 1 on a regression."""
    from selfrag_core.evaluation import EvalSettings, evaluate, load_questions

    data = load_questions(args.questions)
    for problem in data.problems[:20]:
        print(f"selfrag: skipped {problem}", file=sys.stderr)
    baseline = None
    if args.baseline is not None:  # a baseline the gate cannot read fails before the run, not after it
        from selfrag_core.evaluation.gate import read_run

        baseline = read_run(args.baseline)
    data, limit = _in_file_order(args, data)
    names = [n.strip() for n in args.strategies.split(",") if n.strip()]
    spec, rag, index = _eval_backend(args, data)
    out = Path(args.out) if args.out else Path("eval-results") / data.name
    cache = Path(args.cache) if args.cache else _cache_home() / "selfrag" / "llm-calls.sqlite"
    if args.dry_run:
        return _dry_run(args, data.sample(limit, args.seed), names, rag, index)
    progress = Progress(args.plain)
    scratch = _ray_scratch(args, spec)
    if scratch is not None:  # the index built here, opened by each worker
        index = str(Path(scratch.name) / "index")
    executor = None if args.ray is None else _ray_executor(args, index)
    llm = _llm(args)
    settings = EvalSettings(**_eval_settings(args, limit, None if args.no_cache else cache, out))
    # the steps as they go: opening or indexing the corpus (documents), then the questions
    try:
        report = evaluate(
            data, names, llm=llm, rag=rag, corpus=args.corpus, index=index, judge=llm if args.judge else None,
            steps=progress, settings=settings, executor=executor,
        )  # fmt: skip
    finally:
        if scratch is not None:
            scratch.cleanup()
    _print_run(report, out)
    if args.fit_router:
        _fit_router(args, report, out)
    if args.fit_verifier:
        _fit_verifier(args, report, out)
    if baseline is None:
        return 0
    from selfrag_core.evaluation.gate import compare_runs, gate_report, regressions

    comparisons = compare_runs(report, baseline, seed=args.seed)
    print(f"\n{gate_report(comparisons)}")
    return 1 if regressions(comparisons) else 0


def _in_file_order(args: argparse.Namespace, data: Any) -> tuple[Any, int | None]:
    """The questions and the sample's size: with ``--offset``, a slice in file order (questions
    OFFSET .. OFFSET+LIMIT-1), not a sample (the size then None); else as they are."""
    limit = args.limit
    if args.offset is None:
        return data, limit
    if args.offset < 0:
        raise CLIError(f"--offset must be 0 or more, got {args.offset}")
    end = None if limit is None else args.offset + limit
    data = dataclasses.replace(data, questions=data.questions[args.offset : end])
    if not data.questions:
        raise CLIError(f"--offset {args.offset} skips every question of {args.questions}")
    return data, None


def _eval_backend(args: argparse.Namespace, data: Any) -> tuple[str | None, Any, str | None]:
    """The run's documents: the ``--backend`` spec and its opened backend (else None), and
    the index directory (``--index``; the user's own when nothing else gives documents)."""
    spec = _external_backend(args)
    if spec is not None and args.corpus is not None:
        raise CLIError(
            f"--corpus is indexed into an embedded index, --backend {spec} is searched as it is: give one"
        )
    rag = _open_external(args, spec) if spec is not None else None
    index = args.index
    if index is None and rag is None and args.corpus is None and data.corpus is None:
        index = str(default_index_dir())  # the user's own index
    return spec, rag, index


def _eval_settings(
    args: argparse.Namespace, limit: int | None, cache: Path | None, out: Path
) -> dict[str, Any]:
    """The fields of the run's :class:`~selfrag_core.evaluation.EvalSettings`, from the options."""
    return dict(
        k=args.k, top_k=args.top_k, preset=preset_for(args.llm), retrieval_only=args.retrieval_only or None,
        limits={"max_llm_calls": args.max_llm_calls, "llm_timeout": args.llm_timeout or None,
                "query_timeout": args.timeout or None, **_routing(args)},
        cache=cache, replay=args.replay, shared_replies=args.shared_replies,
        concurrency=args.concurrency, limit=limit, seed=args.seed, output=out, embed=args.embedder,
        verifier=_verifier(args), support_features=bool(args.fit_verifier),
        extra={"llm": args.llm, **_generation_options(args), "offset": args.offset, **_routing(args)},
    )  # fmt: skip


def _print_run(report: Any, out: Path) -> None:
    """The report's table, the calls replayed and made, and where the results are."""
    print(report.table())
    if report.cache is not None:
        hits, misses = report.cache["hits"], report.cache["misses"]
        where = report.cache["path"] or "the run's replies"
        print(f"\nLLM calls: {hits} replayed from {where}, {misses} made")
    html = out / "report.html"
    extra = f", {html}" if html.exists() else " (pip install 'selfrag[eval]' for report.html)"
    print(f"results: {out / 'results.jsonl'}, {out / 'summary.json'}{extra}")


def _ray_scratch(args: argparse.Namespace, spec: str | None) -> Any:
    """With ``--ray`` and neither ``--index`` nor ``--backend``: a temporary directory for
    the corpus's index, built here and opened by each worker (else None). Without Ray
    installed, a one-line error naming the extra."""
    if args.ray is None:
        if args.ray_workers is not None:
            raise CLIError("--ray-workers is for --ray: the local run answers on --concurrency threads")
        return None
    from selfrag_core.evaluation.ray import require_ray

    require_ray()  # before anything is loaded
    if spec is not None or args.index is not None:
        return None
    return tempfile.TemporaryDirectory(prefix="selfrag-ray-")


def _ray_executor(args: argparse.Namespace, index: str | None) -> Any:
    """``--ray [ADDRESS]``: the questions on Ray actors, each ``--threads`` CPUs (1 by default)."""
    from selfrag_core.evaluation.ray import RayExecutor

    address = None if args.ray == "local" else args.ray
    cpus = args.threads or 1  # each actor's num_cpus: its local model's threads
    parts = functools.partial(ray_parts, args, index)
    return RayExecutor(parts, address=address, workers=args.ray_workers, cpus_per_worker=cpus)


def ray_parts(args: argparse.Namespace, index: str | None) -> tuple[Any, Any, Any]:
    """A Ray worker's LLM, backend and judge, built as ``selfrag eval`` builds them (the
    local model with ``--threads`` threads, one by default: the actor's CPUs)."""
    from selfrag_core.presets import open_index

    options = argparse.Namespace(**{**vars(args), "threads": args.threads or 1})
    llm = _llm(options)
    spec = _external_backend(options)
    if spec is not None:
        rag = _open_external(options, spec)
    elif index is not None:
        rag = open_index(Path(index), create=False)
    else:
        raise CLIError("a Ray worker has no index to open: give --index DIR on a file system every node sees")
    return llm, rag, llm if args.judge else None


def _dry_run(args: argparse.Namespace, data: Any, names: list[str], rag: Any, index: str | None) -> int:
    """``selfrag eval --dry-run``: the expected LLM calls and input tokens, before any call
    (and before any document is embedded: see ``dry_run_backend``)."""
    from selfrag_core.evaluation.router import dry_run, dry_run_backend
    from selfrag_core.evaluation.runner import ranks_only

    progress = Progress(args.plain)
    ranking = ranks_only(data, args.retrieval_only or None)
    if ranking:  # nothing to search: no answer prompt
        basis = "the prompts of HyDE's hypothetical documents (a retrieval-only run ranks, answering nothing)"
    else:
        rag, passages = dry_run_backend(
            data, names, rag, corpus=args.corpus, index=index, embed=args.embedder, steps=progress
        )
        basis = f"the answer prompt over {passages}"
    expected = dry_run(
        data, names, rag, top_k=args.top_k, preset=preset_for(args.llm), steps=progress,
        retrieval_only=ranking, **_routing(args),
    )  # fmt: skip
    n = len(data.questions)
    print(f"{data.name}: {n} question(s); expected before any LLM call (estimates: no model was called)")
    print(f"input tokens: {basis}, four characters a token")
    left = [name for name in names if name not in expected]
    if left:
        print(f"left out of a retrieval-only run (they cannot rank on their own): {', '.join(left)}")
    print(f"{'contender':<12} {'calls/q':>8} {'at most':>8} {'input tokens/q':>15} {'calls in all':>13}")
    for name, e in expected.items():
        print(
            f"{name:<12} {e['calls']:>8.2f} {e['calls_max']:>8.2f} {e['input_tokens']:>15,.0f} "
            f"{e['calls'] * n:>13,.0f}"
        )
    print(f"in all: about {sum(e['calls'] for e in expected.values()) * n:,.0f} LLM calls")
    return 0


def _fit_router(args: argparse.Namespace, report: Any, out: Path) -> None:
    """``--fit-router FILE``: the router fitted on this run, its held-out row, in FILE and summary.json."""
    from selfrag_core.evaluation.router import fit_router

    fit = fit_router(
        report, metric=args.fit_metric, holdout=args.holdout, seed=args.seed, call_budget=args.call_budget,
        min_gain_per_call=args.min_gain_per_call,
    )  # fmt: skip
    path = fit.write(args.fit_router)
    print(f"\n{fit.table()}\nrouter: {path} (use it with --strategy adaptive --router {path})")
    _add_to_summary(out, "router", {"path": str(path), **fit.figures()})


def _fit_verifier(args: argparse.Namespace, report: Any, out: Path) -> None:
    """``--fit-verifier FILE``: the support check refitted on this run's answers, the
    shipped and refit checks' held-out figures, in FILE and summary.json."""
    from selfrag_core.evaluation.verifier_fit import fit_verifier

    fit = fit_verifier(report, holdout=args.holdout)
    path = fit.write(args.fit_verifier)
    print(f"\n{fit.table()}\nchecks: {path} (use them with --verifier {path})")
    _add_to_summary(out, "verifier_fit", {"path": str(path), **fit.figures()})


def _add_to_summary(out: Path, key: str, value: dict[str, Any]) -> None:
    """``value`` under ``key`` in the run's summary.json, when it was written."""
    summary = out / "summary.json"
    if summary.exists():
        data = load_json(summary.read_text(encoding="utf-8"))
        data[key] = value
        summary.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
