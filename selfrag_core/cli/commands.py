"""The commands but ``eval``, and the LLM and strategies they build from their options."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from importlib import resources
from pathlib import Path
from typing import Any

from selfrag_core.cli.files import (
    CLIError,
    _data_home,
    _external_backend,
    _index_dir,
    _open_external,
    _writer,
    delete_sources,
    gather,
    gone_sources,
    index_paths,
)
from selfrag_core.cli.output import _usage, checked_line, print_result, run_strategy, step_lines, unanswered
from selfrag_core.display import one_line
from selfrag_core.engine import observe_trace
from selfrag_core.errors import ConfigurationError, RAGSystemError, misconfiguration_hint
from selfrag_core.ingest import Writer, writer
from selfrag_core.presets import (
    ADAPTIVE,
    BASELINE,
    STRATEGIES,
    build_strategy,
    load_verifier,
    open_index,
    preset_for,
)
from selfrag_core.progress import Progress
from selfrag_core.strategies.registry import BUILT_IN


def cmd_index(args: argparse.Namespace) -> int:
    spec = _external_backend(args)
    if args.ray is not None:
        from selfrag_core.evaluation.ray import require_ray

        require_ray()  # a one-line error naming the extra, before anything is read
        if spec is not None:
            raise CLIError(
                "--ray indexes into the embedded index (--index DIR); a --backend server embeds itself"
            )
    elif args.ray_workers is not None:
        raise CLIError("--ray-workers is for --ray")
    gathered = gather(args.paths)  # missing paths fail before the index is opened
    if spec is None:
        directory = _index_dir(args)
        rag = open_index(directory, create=True, embed=args.embedder, chunk_size=args.chunk_size)
    else:  # a Chroma collection, or a backend registered by URL or made by a factory
        rag = _open_external(args, spec)
    w = _writer(rag, spec)
    gone = gone_sources(w, args.paths)
    dropped = {} if args.keep_removed or not gone else delete_sources(w, gone)
    progress = Progress(args.plain)
    upgrade = getattr(rag, "upgrade_bm25", None)  # an index an older selfrag saved: its BM25 terms anew
    upgraded = spec is None and callable(upgrade) and bool(upgrade())
    if upgraded:
        progress.say("the BM25 index, saved by an older selfrag, was rebuilt: identifiers are searchable")
    changed = any(dropped.values()) or upgraded
    if args.ray is not None:
        from selfrag_core.cli.ray_index import index_on_ray

        address = None if args.ray == "local" else args.ray
        done = index_on_ray(
            rag, gathered, progress, address=address, workers=args.ray_workers, encoding=args.encoding,
            verbose=args.verbose, changed=changed,
        )  # fmt: skip
    else:
        done = index_paths(
            rag, gathered, progress, encoding=args.encoding, verbose=args.verbose, changed=changed
        )
    more = "" if args.verbose else " (-v lists them)"
    skips = f"; {done.skipped} file(s) skipped{more}" if done.skipped else ""
    removed = _removed_note(gone, dropped) + _emptied_note(done.emptied)
    print(f"{done.files} file(s) read, {done.added} new chunk(s){removed}{_held(w, spec, args)}{skips}")
    if done.problems:
        return 1
    if done.files == 0:
        where = " ".join(args.paths)
        print(f"selfrag: nothing to index in {where}: no readable text files (-v says why)", file=sys.stderr)
        return 1
    return 0


def _removed_note(gone: list[str] | None, dropped: dict[str, int]) -> str:
    """The summary's part on the files gone from the indexed folders."""
    if gone is None:
        return "; files removed from the folder were not looked for (the backend cannot list its sources)"
    if not gone:
        return ""
    if not dropped:
        return f", {len(gone)} file(s) gone from the folder kept (--keep-removed)"
    return f", {len(gone)} removed file(s) dropped ({sum(dropped.values())} chunk(s))"


def _emptied_note(emptied: dict[str, int]) -> str:
    """The summary's part on the indexed files that are empty now (their chunks dropped)."""
    if not emptied:
        return ""
    return f", {len(emptied)} emptied file(s) dropped ({sum(emptied.values())} chunk(s))"


def _held(w: Writer, spec: str | None, args: argparse.Namespace) -> str:
    """The summary's part on what the index or backend holds now."""
    count = w.count()
    if spec is None:
        return f"; index at {_index_dir(args)} now holds {count} chunk(s) from {len(w.sources())} source(s)"
    return f" in {spec}" + (f", which now holds {count} chunk(s)" if count is not None else "")


def cmd_delete(args: argparse.Namespace) -> int:
    """``selfrag delete SOURCE...``: a file's path (made absolute, as indexed) or any other
    source; exit 1 when one of them was not indexed."""
    spec = _external_backend(args)
    rag = open_index(_index_dir(args), create=False) if spec is None else _open_external(args, spec)
    w = _writer(rag, spec)
    sources = [_as_source(s, w) for s in args.sources]
    removed = delete_sources(w, sources)
    if any(removed.values()):
        w.save()
    for source, n in removed.items():
        print(f"deleted {source}: {n} chunk(s)" if n else f"not indexed: {source}")
    print(f"{sum(1 for n in removed.values() if n)} source(s) deleted{_held(w, spec, args)}")
    missing = [s for s, n in removed.items() if not n]
    if missing:
        print(f"selfrag: {len(missing)} source(s) not in the index (`selfrag stats` counts what is)",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _as_source(given: str, w: Writer) -> str:
    """A source as indexed: the name itself when it is indexed so; else a path's absolute,
    resolved form (as ``selfrag index`` stores files) when it names a file or looks like a
    path; else the name."""
    if w.can_list and given in w.sources():
        return given
    path = Path(given).expanduser()
    if path.exists() or os.sep in given or "/" in given or given.startswith((".", "~")):
        return str(path.resolve())
    return given


def _generation_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--llm-max-tokens`` and ``--llm-temperature`` as the LLM factory's options (only the
    ones given); CLIError for a value out of range."""
    options: dict[str, Any] = {}
    max_tokens = getattr(args, "llm_max_tokens", None)
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise CLIError(f"--llm-max-tokens must be a whole number >= 1, got {max_tokens!r}")
        options["max_tokens"] = max_tokens
    temperature = getattr(args, "llm_temperature", None)
    if temperature is not None:
        number = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
        if not (number and math.isfinite(temperature) and temperature >= 0):
            raise CLIError(f"--llm-temperature must be a number >= 0 (0: deterministic), got {temperature!r}")
        options["temperature"] = float(temperature)
    return options


def _llm(args: argparse.Namespace) -> Any:
    from selfrag_core.local.factory import make_llm

    options: dict[str, Any] = {"n_threads": args.threads} if args.threads else {}
    if getattr(args, "llm_base_url", None):
        if not args.llm.startswith("openai:"):
            raise CLIError(
                f"--llm-base-url is for --llm openai:MODEL (an OpenAI-compatible server), not {args.llm!r}"
            )
        options = {"base_url": args.llm_base_url}
    options.update(_generation_options(args))  # the flags win over any default or environment
    try:
        return make_llm(args.llm, **options)
    except (RAGSystemError, ValueError, OSError):
        raise
    except Exception as e:  # a provider's client refused its settings (no API key, ...)
        hint = misconfiguration_hint(e) or "check the provider's settings and credentials"
        raise CLIError(f"could not create the LLM {args.llm!r}: {type(e).__name__}: {e}; {hint}") from e


def _strategy(args: argparse.Namespace, name: str, rag: Any, llm: Any, verifier: Any = None) -> Any:
    strategy = build_strategy(
        name, rag, llm, top_k=args.top_k, max_llm_calls=args.max_llm_calls,
        llm_timeout=args.llm_timeout or None, query_timeout=args.timeout or None, preset=preset_for(args.llm),
        verifier=verifier, **_routing(args),
    )  # fmt: skip
    # a limit's message names the flag that sets it
    knobs = {"query_timeout": "--timeout", "llm_timeout": "--llm-timeout", "max_llm_calls": "--max-llm-calls"}
    strategy.execution = dataclasses.replace(strategy.execution, knobs=knobs)
    return strategy


def _verifier(args: argparse.Namespace) -> Any:
    """``--verifier``'s verifier, loaded once per command (None: the default one)."""
    spec = getattr(args, "verifier", None)
    return load_verifier(spec) if spec else None


def _routing(args: argparse.Namespace) -> dict[str, Any]:
    """``--router`` and ``--call-budget``, for ``adaptive`` (the other strategies ignore them)."""
    return {"router": getattr(args, "router", None), "call_budget": getattr(args, "call_budget", None)}


def cmd_ask(args: argparse.Namespace) -> int:
    spec = _external_backend(args)
    if spec is not None:
        rag = _open_external(args, spec)
        try:
            empty = writer(rag).count() == 0
        except ConfigurationError:  # a backend only searched: nothing to count
            empty = False
        if empty:
            raise CLIError(f"the backend {spec} is empty; run `selfrag index PATH... --backend {spec}` first")
    else:
        rag = open_index(_index_dir(args), create=False)
        if rag.count() == 0:
            raise CLIError(f"the index at {_index_dir(args)} is empty; run `selfrag index PATH...` first")
    if args.strategy != ADAPTIVE and (args.router or args.call_budget is not None):
        raise CLIError(f"--router and --call-budget are for --strategy {ADAPTIVE}, not {args.strategy!r}")
    metadata_filter = metadata_filter_of(getattr(args, "filters", None) or [], _writer_of(rag))
    verifier = _verifier(args)
    strategy = _strategy(args, args.strategy, rag, _llm(args), verifier)
    context = {"metadata_filter": metadata_filter} if metadata_filter else None
    with nullcontext() if args.quiet else observe_trace(step_lines(Progress(args.plain))):
        result = run_strategy(strategy, args.question, context)
    if metadata_filter and getattr(result, "no_answer", None) == "no_documents":
        shown = " ".join(f"--filter {k}={json.dumps(v) if not isinstance(v, str) else v}"
                         for k, v in metadata_filter.items())  # fmt: skip
        raise CLIError(
            f"no indexed chunk matches {shown}: a filter compares the metadata exactly (a file "
            "indexed by `selfrag index` has title, its file name, and source, its absolute path)",
            code=1,
        )
    why = unanswered(result)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    elif why is None:
        print_result(result, args.question, verifier)
    if why is not None:
        raise CLIError(
            f"no answer could be generated: {why} (see --json for the trace; --llm-timeout and --timeout "
            "bound the wait)",
            code=1,
        )
    return 0


def _writer_of(rag: Any) -> Writer | None:
    """``rag``'s writer, None for a backend that is only searched."""
    try:
        return writer(rag)
    except ConfigurationError:
        return None


def metadata_filter_of(filters: list[str], w: Writer | None = None) -> dict[str, Any]:
    """``--filter KEY=VALUE`` options as a ``metadata_filter`` (what the HTTP service's
    ``metadata_filter`` is: each key's value must equal it). VALUE is read as JSON when it
    is a number, ``true``/``false`` or a quoted string, else taken as it is; a ``source``
    is taken as indexed (``selfrag delete``'s rule: a relative path is made absolute) when
    ``w`` is given. CLIError for a malformed option or a key given twice."""
    conditions: dict[str, Any] = {}
    for given in filters:
        key, sep, raw = given.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CLIError(f"--filter {given!r} is not KEY=VALUE; e.g. --filter title=pep-0572.txt")
        if key in conditions:
            raise CLIError(f"--filter {key}=... is given twice; a chunk's {key} has one value: give it once")
        value: Any = raw
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, (bool, int, float, str)) and not (
            isinstance(parsed, float) and not math.isfinite(parsed)
        ):
            value = parsed
        if key == "source" and isinstance(value, str) and w is not None:
            value = _as_source(value, w)
        conditions[key] = value
    return conditions


def index_stats(rag: Any, directory: Path) -> dict[str, Any]:
    size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) if directory.is_dir() else 0
    mode = "lexical" if rag.bm25_alpha == 0 else "dense" if rag.bm25_alpha == 1 else "hybrid"
    embedder = rag.embedder
    return {
        "index": str(directory),
        "chunks": rag.count(),
        "sources": len(rag.sources()),
        "search": mode,
        "embedder": None if embedder is None else getattr(embedder, "name", type(embedder).__name__),
        "chunk_size": rag.chunker.settings().get("chunk_size"),
        "bytes_on_disk": size,
    }


def cmd_stats(args: argparse.Namespace) -> int:
    directory = _index_dir(args)
    stats = index_stats(open_index(directory, create=False, read_only=True), directory)
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        for key, value in stats.items():
            print(f"{key:>14}: {value}")
    return 0


#: the sources of the demo's sample documents: this prefix and the file's name
DEMO_SOURCE = "selfrag-demo/"


def demo_index_dir() -> Path:
    return _data_home() / "selfrag" / "demo-index"


def demo_questions() -> list[str]:
    text = resources.files("selfrag_core").joinpath("data/demo_questions.json").read_text(encoding="utf-8")
    questions: list[str] = json.loads(text)
    return questions


def cmd_demo(args: argparse.Namespace) -> int:
    directory = _index_dir(args, demo_index_dir)
    progress = Progress(args.plain)
    corpus = resources.files("selfrag_core").joinpath("data/demo")
    started = time.perf_counter()
    rag = open_index(directory, create=True, embed=args.embedder, chunk_size=args.chunk_size)
    with resources.as_file(corpus) as corpus_dir:
        gathered = gather([str(corpus_dir)])
        names = {path: path.relative_to(corpus_dir).as_posix() for path, _ in gathered.files}
        # keyed by name, not by where the package is installed: a second install replaces the
        # sample documents instead of adding a copy; copies an older selfrag keyed by path go
        w = writer(rag)
        copies = [s for s in w.sources() if any(s.endswith(f"/data/demo/{n}") for n in names.values())]
        dropped = delete_sources(w, copies)
        files = index_paths(
            rag, gathered, progress, changed=any(dropped.values()), source=lambda p: DEMO_SOURCE + names[p]
        ).files
    progress.say(f"indexed {files} sample documents ({rag.count()} chunks) into {directory}")
    llm, verifier = _llm(args), _verifier(args)
    questions = demo_questions()[: args.questions]
    # plain answers first, the reference each strategy's answer is read against
    strategies = [BASELINE, *[n for n in args.strategies or STRATEGIES if n != BASELINE]]
    rows = []
    with progress.task("demo", len(questions) * len(strategies), "answers") as advance:
        for question in questions:
            plain = None
            for name in strategies:
                advance(0, f"{name}: {one_line(question, 60)}")
                result = run_strategy(_strategy(args, name, rag, llm, verifier), question)
                plain = result if name == BASELINE else plain
                rows.append((name, question, result))
                progress.say(f"\n[{name}] {question}\n  -> {one_line(result.answer)}")
                summary = result.summary()
                progress.say(f"  {summary + '; ' if summary else ''}{_usage(result)}")
                checked = checked_line(result, question, verifier, plain)
                if checked:
                    progress.say(f"  checked: {checked}")
                advance(1)
    calls = sum(r.trace.llm_calls for _, _, r in rows)
    print(f"demo: {len(rows)} answers, {calls} LLM calls in {time.perf_counter() - started:.1f} s; try:")
    print(f'  selfrag ask "{questions[0]}" --index {directory} --strategy self')
    return 0


def serve_app(args: argparse.Namespace) -> Any:
    """The app ``selfrag serve`` serves (one per worker process), from its parsed options."""
    from selfrag_core.serve import create_app, settings_from_args  # MissingDependencyError with the hint

    spec = _external_backend(args)
    if spec is not None:  # every worker its own client: no index directory, no file lock
        directory = None
        rag = _open_external(args, spec)
        args.index = None
    else:
        directory = _index_dir(args)
        rag = open_index(directory, create=True, embed=args.embedder, chunk_size=args.chunk_size)
    llm, verifier = _llm(args), _verifier(args)
    strategies = {
        name: build_strategy(
            name, rag, llm, top_k=args.top_k, max_llm_calls=args.max_llm_calls, preset=preset_for(args.llm),
            verifier=verifier, **_routing(args),
        )
        for name in BUILT_IN  # every built-in strategy, /query/plain too, as ask and eval have them
    }  # fmt: skip
    settings = settings_from_args(args, index_dir=None if directory is None else str(directory))
    return create_app(rag=rag, llm=llm, strategies=strategies, settings=settings)


def cmd_serve(args: argparse.Namespace) -> int:
    from selfrag_core.serve.server import serve_forever, serve_workers

    if _external_backend(args) is None:
        args.index = str(_index_dir(args))  # every worker opens the same directory
    else:
        args.index = None  # every worker opens its own client to the backend
    if args.workers > 1:
        serve_workers("selfrag_core.cli.commands:serve_app", args, args.workers)
    else:
        serve_forever(serve_app(args), args.host, args.port, log_level=args.log_level)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from selfrag_core.mcp_server import SelfragTools, create_server, http_app, run_stdio  # the install hint
    from selfrag_core.serve.server import serve_forever, warn_if_open
    from selfrag_core.serve.settings import ServeSettings

    spec = _external_backend(args)
    directory = None if spec is not None else _index_dir(args)
    if directory is None:
        rag = _open_external(args, str(spec))
    else:
        rag = open_index(directory, create=True, embed=args.embedder, chunk_size=args.chunk_size)
    llm, verifier = _llm(args), _verifier(args)
    strategies = {name: _strategy(args, name, rag, llm, verifier) for name in BUILT_IN}
    # the token matters over HTTP only: stdio is the client's own child process
    settings = ServeSettings.from_env() if args.http else ServeSettings()
    tools = SelfragTools(
        rag, strategies, index_dir=None if directory is None else str(directory), settings=settings
    )
    server = create_server(tools)
    if args.http:
        warn_if_open(args.host, settings.api_token)
        serve_forever(http_app(server, settings, args.host), args.host, args.port, log_level="warning")
    else:
        run_stdio(server)
    return 0
