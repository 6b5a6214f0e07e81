"""``selfrag``: index documents and ask questions offline, on the embedded backend and
a local LLM.

    selfrag index PATH...                 # files and folders (text files, recursively); files gone
                                          # from a folder leave the index (--keep-removed keeps them)
    selfrag delete SOURCE...              # the chunks of indexed files (paths) or other sources
    selfrag ask "question" --strategy self|hyde|recursive|healing [--json]
    selfrag demo                          # sample corpus + all four strategies
    selfrag stats [--json]
    selfrag eval questions.jsonl --corpus corpus.jsonl   # each strategy against a plain retrieve-and-answer
    selfrag mcp [--http]                  # the tools ask, search, add_documents for MCP clients

The index lives in ``--index DIR``, else ``$SELFRAG_INDEX``, else the per-user data
directory (``$XDG_DATA_HOME/selfrag/index``, by default ``~/.local/share/selfrag/index``).
``--backend SPEC`` (index, ask, eval, serve) wins over it: an index directory, a Chroma
server (``chroma://HOST:PORT/COLLECTION``) or a backend of your own (``module:factory``,
``file.py:factory``); see ``presets.open_backend``.
Results go to stdout; progress, warnings and errors to stderr. Exit codes: 0 done,
1 done with skipped input (or nothing to index), 2 nothing done (bad input or setup),
130 interrupted. An index is only ever replaced atomically, so a failure never loses
what was already indexed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from selfrag_core.display import one_line, score_label, snippet, step_text
from selfrag_core.engine import observe_trace
from selfrag_core.errors import ConfigurationError, RAGSystemError, StrategyError, misconfiguration_hint
from selfrag_core.ingest import Writer, ingest, writer
from selfrag_core.presets import (  # build_strategy and open_index re-exported: they lived here
    ADAPTIVE,
    BASELINE,
    DEFAULT_LLM_TIMEOUT,
    DEFAULT_QUERY_TIMEOUT,
    EMBEDDERS,
    STRATEGIES,
    backend_kind,
    build_strategy,
    open_backend,
    open_index,
    preset_for,
)
from selfrag_core.progress import INTERVAL as PROGRESS_INTERVAL
from selfrag_core.progress import Progress  # re-exported: it lived here
from selfrag_core.strategies.base import GENERATION_FAILED_ANSWER, NOT_ENOUGH_ANSWER, run_query, step_of
from selfrag_core.strategies.hyde import INSUFFICIENT_ANSWER
from selfrag_core.strategies.registry import BUILT_IN
from selfrag_core.strategies.self_healing import NO_CONTEXT_ANSWER
from selfrag_core.types import Result

#: the strategies' answers when they found nothing to answer from
NO_INFORMATION_ANSWERS = (INSUFFICIENT_ANSWER, NOT_ENOUGH_ANSWER, NO_CONTEXT_ANSWER)

logger = logging.getLogger("selfrag")

#: never read when met inside a folder (named explicitly, they are still tried); other files
#: are read and skipped when they turn out binary, empty or not decodable
BINARY_SUFFIXES = frozenset({
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".ico", ".webp", ".pdf", ".zip", ".gz", ".bz2", ".xz", ".tar",
    ".7z", ".whl", ".pyc", ".so", ".dll", ".dylib", ".exe", ".o", ".a", ".npy", ".npz", ".pkl", ".bin",
    ".gguf", ".safetensors", ".pt", ".onnx", ".db", ".sqlite", ".mp3", ".mp4", ".wav", ".ogg", ".woff",
    ".woff2", ".ttf", ".otf", ".docx", ".xlsx", ".pptx", ".odt",
})  # fmt: skip
SKIP_DIRS = frozenset({"__pycache__", "node_modules", "venv", "site-packages"})  # and every hidden folder
MAX_FILE_BYTES = 20_000_000
_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
         (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))  # fmt: skip
_BATCH = 32


class CLIError(Exception):
    """A one-line problem with its fix; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class SkipFile(Exception):
    """A file that cannot be indexed; the message names the problem and the fix."""


# ----------------------------------------------------------------------------- paths


def default_index_dir() -> Path:
    """``$SELFRAG_INDEX``, else ``$XDG_DATA_HOME/selfrag/index`` (``~/.local/share`` by default)."""
    if os.environ.get("SELFRAG_INDEX"):
        return Path(os.environ["SELFRAG_INDEX"]).expanduser()
    return _data_home() / "selfrag" / "index"


def _data_home() -> Path:
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]).expanduser()
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"])
    return Path.home() / ".local" / "share"


def _index_dir(args: argparse.Namespace, default: Callable[[], Path] = default_index_dir) -> Path:
    return Path(args.index).expanduser() if args.index else default()


def _external_backend(args: argparse.Namespace) -> str | None:
    """The ``--backend`` spec when it names something other than an index directory (a
    Chroma server, a factory), else None; a directory given as ``--backend`` becomes
    ``--index`` (it wins over one given too)."""
    spec: str | None = getattr(args, "backend", None)
    if not spec:
        return None
    if backend_kind(spec) == "directory":
        args.index, args.backend = spec, None
        return None
    if args.index:
        logger.info("--backend %s wins over --index %s", spec, args.index)
    return spec


def _open_external(args: argparse.Namespace, spec: str) -> Any:
    """The backend ``spec`` names, with ``--embedder`` and ``--chunk-size`` where the
    command has them."""
    return open_backend(
        spec, embed=getattr(args, "embedder", "auto"), chunk_size=getattr(args, "chunk_size", 600)
    )


# ----------------------------------------------------------------------------- reading files


@dataclass
class Gathered:
    files: list[tuple[Path, bool]] = field(default_factory=list)  # (path, named explicitly)
    ignored_files: list[Path] = field(default_factory=list)  # files with binary suffixes met inside folders

    @property
    def ignored(self) -> int:
        return len(self.ignored_files)


def gather(paths: Sequence[str]) -> Gathered:
    """Files to index: named files, and files under named folders (recursively, hidden
    and tool folders skipped). Raises CLIError naming every missing path."""
    missing = [p for p in paths if not Path(p).expanduser().exists()]
    if missing:
        raise CLIError(
            f"no such file or directory: {', '.join(missing)}; check the path(s), nothing was indexed"
        )
    out = Gathered()
    for raw in paths:
        path = Path(raw).expanduser()
        if not path.is_dir():
            out.files.append((path, True))
            continue
        for root, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
            for name in sorted(names):
                file = Path(root) / name
                if name.startswith(".") or not file.is_file():
                    continue
                if file.suffix.lower() in BINARY_SUFFIXES:
                    out.ignored_files.append(file)
                else:
                    out.files.append((file, False))
    return out


def read_text(path: Path, encoding: str | None = None) -> str:
    """The text of a file: UTF-8 (or the BOM's encoding); ``encoding`` for other files.
    Raises SkipFile for binary, empty, oversized or undecodable files."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SkipFile(f"larger than {MAX_FILE_BYTES // 1_000_000} MB; split it into smaller files")
        data = path.read_bytes()
    except OSError as e:
        raise SkipFile(f"cannot be read ({e.strerror or e}); check its permissions") from e
    codec = next((name for bom, name in _BOMS if data.startswith(bom)), None)
    if codec is None and b"\x00" in data[:8192]:
        raise SkipFile("is a binary file, not text; convert it to text (e.g. .txt or .md) to index it")
    try:
        text = data.decode(codec or "utf-8")
    except UnicodeDecodeError as e:
        if encoding is None:
            raise SkipFile(
                f"is not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start}); convert it to UTF-8 "
                "or pass --encoding (e.g. --encoding cp1252)"
            ) from e
        try:
            text = data.decode(encoding)
        except (UnicodeDecodeError, LookupError) as e2:
            raise SkipFile(f"cannot be decoded as {encoding} ({e2}); convert it to UTF-8") from e2
        logger.warning("%s is not UTF-8: decoded as %s", path, encoding)
    if not text.strip():
        raise SkipFile("is empty; add text to it or leave it out")
    return text


# ----------------------------------------------------------------------------- the index


def index_paths(
    rag: Any,
    gathered: Gathered,
    progress: Progress,
    *,
    encoding: str | None = None,
    verbose: bool = False,
    changed: bool = False,
    source: Callable[[Path], str] = lambda path: str(path.resolve()),
) -> tuple[int, int, int, list[str]]:
    """Index the gathered files into ``rag`` (through :func:`~selfrag_core.ingest.ingest`),
    each under ``source(path)`` (its absolute path by default), and save it when anything
    changed (``changed``: something was deleted before). Returns (files read, chunks added,
    files skipped, problems of explicitly named files)."""
    docs: list[dict[str, Any]] = []
    explicit_problems: list[str] = []
    skipped = gathered.ignored
    if verbose:
        for path in gathered.ignored_files:
            progress.say(
                f"skipped: {path} ({path.suffix.lower()}: not read inside a folder; name the file to try it)"
            )
    with progress.task("reading files", len(gathered.files), "files") as advance:
        for path, explicit in gathered.files:
            try:
                docs.append({"text": read_text(path, encoding), "source": source(path), "title": path.name})
            except SkipFile as e:
                skipped += 1
                if explicit:
                    explicit_problems.append(f"{path} {e}")
                if explicit or verbose:
                    progress.say(f"skipped: {path} {e}")
            advance()
    # the save is atomic, under the index's lock, over whatever another writer saved meanwhile
    with progress.task("indexing", len(docs), "files") as advance:
        report = ingest(rag, docs, batch_size=_BATCH, save=True, progress=advance)
    if changed and not report.saved:
        writer(rag).save()
    return len(docs), report.chunks or 0, skipped, explicit_problems


def _writer(backend: Any, spec: str | None) -> Writer:
    """``backend`` resolved for writing; CLIError naming the fix when it cannot store documents."""
    try:
        return writer(backend)
    except ConfigurationError as e:
        where = f"the backend {spec}" if spec else "the index"
        raise CLIError(
            f"{where}: {e}; or index into a directory (--index DIR) or a Chroma server "
            "(--backend chroma://HOST:PORT/NAME)"
        ) from e


def gone_sources(w: Writer, paths: Sequence[str]) -> list[str] | None:
    """The indexed files under the folders among ``paths`` that no longer exist (their
    sources are absolute paths); None when the backend cannot list its sources."""
    folders = [Path(p).expanduser().resolve() for p in paths if Path(p).expanduser().is_dir()]
    if not folders:
        return []
    if not w.can_list:
        return None
    gone = []
    for source in w.sources():
        path = Path(source)
        if path.is_absolute() and any(path.is_relative_to(f) for f in folders) and not path.exists():
            gone.append(source)
    return gone


def delete_sources(w: Writer, sources: Sequence[str]) -> dict[str, int]:
    """Delete each source's chunks; the chunks removed per source (0: it was not indexed)."""
    return {source: w.delete(source) for source in sources}


# ----------------------------------------------------------------------------- strategies


def run_strategy(strategy: Any, question: str) -> Any:
    """The strategy's result object (SelfHealingRAG's report when every attempt failed)."""
    try:
        return run_query(strategy, question)
    except StrategyError as e:
        if e.report is None:
            raise
        return e.report


def step_lines(progress: Progress) -> Callable[[Any], None]:
    """A trace listener (:func:`~selfrag_core.engine.observe_trace`) that says each step of
    a query (:func:`~selfrag_core.strategies.base.step_of`) on stderr as it happens."""

    def say(event: Any) -> None:
        step = step_of(event)
        if step is not None:
            progress.say(f"- {step_text(step)}")

    return say


def _sources(result: Result[Any], limit: int = 10, question: str = "") -> list[str]:
    """The result's documents as numbered in its prompt (what ``[n]`` markers point to):
    each with its file, its score and the score's kind, and the part of its text that
    matched ``question`` (the start when none did)."""
    lines = []
    for doc in result.documents[:limit]:
        source = getattr(doc, "source", "") or doc.metadata.get("source") or doc.id or "?"
        label = score_label(doc)
        score = f" ({label})" if label else ""
        lines.append(f"{source}{score}: {snippet(doc.text, question, 100)}")
    return lines


def _citations(result: Result[Any]) -> list[str]:
    """How far sources support the answer's sentences, and the ones none supports."""
    citations = result.citations
    if not citations:
        return []
    supported = sum(1 for c in citations if c.supported)
    cited = sum(1 for c in citations if c.cited)
    lines = [
        f"Citations: {supported} of {len(citations)} sentence(s) supported by a source "
        f"({cited} cited by the model, {len(citations) - cited} attributed)"
    ]
    lines += [f"  unsupported: {one_line(c.sentence, 100)}" for c in citations if not c.supported]
    return lines


def _usage(result: Any) -> str:
    t = result.trace
    tokens = f"{t.input_tokens} in, {t.output_tokens} out"
    return f"LLM calls: {t.llm_calls}; tokens: {tokens}; time: {t.wall_s:.1f} s"


def print_result(result: Result[Any], question: str = "") -> None:
    print(result.answer.strip() or "(no answer)")
    print()
    quality = result.summary()
    if quality:
        print(quality[0].upper() + quality[1:])
    sources = _sources(result, question=question)
    if sources:
        print("Sources:")
        for i, line in enumerate(sources, 1):
            print(f"  [{i}] {line}")
    for line in _citations(result):
        print(line)
    print(_usage(result))


# ----------------------------------------------------------------------------- commands


def cmd_index(args: argparse.Namespace) -> int:
    spec = _external_backend(args)
    gathered = gather(args.paths)  # missing paths fail before the index is opened
    if spec is None:
        directory = _index_dir(args)
        rag = open_index(directory, create=True, embed=args.embedder, chunk_size=args.chunk_size)
    else:  # a Chroma collection, or a backend registered by URL or made by a factory
        rag = _open_external(args, spec)
    w = _writer(rag, spec)
    gone = gone_sources(w, args.paths)
    dropped = {} if args.keep_removed or not gone else delete_sources(w, gone)
    files, added, skipped, problems = index_paths(
        rag, gathered, Progress(args.plain), encoding=args.encoding, verbose=args.verbose,
        changed=any(dropped.values()),
    )  # fmt: skip
    skips = f"; {skipped} file(s) skipped" + ("" if args.verbose else " (-v lists them)") if skipped else ""
    removed = _removed_note(gone, dropped)
    print(f"{files} file(s) read, {added} new chunk(s){removed}{_held(w, spec, args)}{skips}")
    if problems:
        return 1
    if files == 0:
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


def _strategy(args: argparse.Namespace, name: str, rag: Any, llm: Any) -> Any:
    strategy = build_strategy(
        name, rag, llm, top_k=args.top_k, max_llm_calls=args.max_llm_calls,
        llm_timeout=args.llm_timeout or None, query_timeout=args.timeout or None, preset=preset_for(args.llm),
        **_routing(args),
    )  # fmt: skip
    # a limit's message names the flag that sets it
    knobs = {"query_timeout": "--timeout", "llm_timeout": "--llm-timeout", "max_llm_calls": "--max-llm-calls"}
    strategy.execution = dataclasses.replace(strategy.execution, knobs=knobs)
    return strategy


def _routing(args: argparse.Namespace) -> dict[str, Any]:
    """``--router`` and ``--call-budget``, for ``adaptive`` (the other strategies ignore them)."""
    return {"router": getattr(args, "router", None), "call_budget": getattr(args, "call_budget", None)}


def unanswered(result: Any) -> str | None:
    """Why no answer could be generated, or None when the result holds an answer: the
    answer is empty, the generation-failed fallback, or a no-information fallback that
    failures (not an index without the answer) led to. The reason is the trace's last
    LLM or retrieval error."""
    answer = result.answer.strip()
    events = result.trace.events
    errors: list[str] = [e.error for e in events if e.error and e.kind in ("llm", "retrieval")]
    if answer not in ("", GENERATION_FAILED_ANSWER) and not (answer in NO_INFORMATION_ANSWERS and errors):
        return None
    notes: list[str] = [e.error for e in events if e.error]
    return (errors or notes or ["the strategy produced no answer"])[-1]


def cmd_ask(args: argparse.Namespace) -> int:
    spec = _external_backend(args)
    if spec is not None:
        rag = _open_external(args, spec)
        counter = getattr(rag, "count", None)
        if callable(counter) and counter() == 0:
            raise CLIError(f"the backend {spec} is empty; run `selfrag index PATH... --backend {spec}` first")
    else:
        rag = open_index(_index_dir(args), create=False)
        if rag.count() == 0:
            raise CLIError(f"the index at {_index_dir(args)} is empty; run `selfrag index PATH...` first")
    if args.strategy != ADAPTIVE and (args.router or args.call_budget is not None):
        raise CLIError(f"--router and --call-budget are for --strategy {ADAPTIVE}, not {args.strategy!r}")
    strategy = _strategy(args, args.strategy, rag, _llm(args))
    with nullcontext() if args.quiet else observe_trace(step_lines(Progress(args.plain))):
        result = run_strategy(strategy, args.question)
    why = unanswered(result)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    elif why is None:
        print_result(result, args.question)
    if why is not None:
        raise CLIError(
            f"no answer could be generated: {why} (see --json for the trace; --llm-timeout and --timeout "
            "bound the wait)",
            code=1,
        )
    return 0


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
        files, _, _, _ = index_paths(
            rag, gathered, progress, changed=any(dropped.values()), source=lambda p: DEMO_SOURCE + names[p]
        )
    progress.say(f"indexed {files} sample documents ({rag.count()} chunks) into {directory}")
    llm = _llm(args)
    questions = demo_questions()[: args.questions]
    strategies = args.strategies or list(STRATEGIES)
    rows = []
    with progress.task("demo", len(questions) * len(strategies), "answers") as advance:
        for question in questions:
            for name in strategies:
                advance(0, f"{name}: {one_line(question, 60)}")
                result = run_strategy(_strategy(args, name, rag, llm), question)
                rows.append((name, question, result))
                progress.say(f"\n[{name}] {question}\n  -> {one_line(result.answer)}")
                progress.say(f"  {result.summary()}; {_usage(result)}")
                advance(1)
    calls = sum(r.trace.llm_calls for _, _, r in rows)
    print(f"demo: {len(rows)} answers, {calls} LLM calls in {time.perf_counter() - started:.1f} s; try:")
    print(f'  selfrag ask "{questions[0]}" --index {directory} --strategy self')
    return 0


def _cache_home() -> Path:
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser()
    return Path.home() / ".cache"


def cmd_eval(args: argparse.Namespace) -> int:
    from selfrag_core.evaluation import evaluate, load_questions

    data = load_questions(args.questions)
    for problem in data.problems[:20]:
        print(f"selfrag: skipped {problem}", file=sys.stderr)
    limit = args.limit
    if args.offset is not None:  # a slice in file order, not a sample: questions OFFSET .. OFFSET+LIMIT-1
        if args.offset < 0:
            raise CLIError(f"--offset must be 0 or more, got {args.offset}")
        end = None if limit is None else args.offset + limit
        data = dataclasses.replace(data, questions=data.questions[args.offset : end])
        if not data.questions:
            raise CLIError(f"--offset {args.offset} skips every question of {args.questions}")
        limit = None
    names = [n.strip() for n in args.strategies.split(",") if n.strip()]
    spec = _external_backend(args)
    if spec is not None and args.corpus is not None:
        raise CLIError(
            f"--corpus is indexed into an embedded index, --backend {spec} is searched as it is: give one"
        )
    rag = _open_external(args, spec) if spec is not None else None
    index = args.index
    if index is None and rag is None and args.corpus is None and data.corpus is None:
        index = str(default_index_dir())  # the user's own index
    out = Path(args.out) if args.out else Path("eval-results") / data.name
    cache = Path(args.cache) if args.cache else _cache_home() / "selfrag" / "llm-calls.sqlite"
    if args.dry_run:
        return _dry_run(args, data.sample(limit, args.seed), names, rag, index)
    progress = Progress(args.plain)
    llm = _llm(args)
    total = len(data.sample(limit, args.seed).questions)
    with progress.task("eval", total, "questions") as advance:
        report = evaluate(
            data, names, llm=llm, rag=rag, corpus=args.corpus, index=index, k=args.k, top_k=args.top_k,
            preset=preset_for(args.llm), retrieval_only=args.retrieval_only or None,
            limits={"max_llm_calls": args.max_llm_calls, "llm_timeout": args.llm_timeout or None,
                    "query_timeout": args.timeout or None, **_routing(args)},
            judge=llm if args.judge else None, cache=None if args.no_cache else cache, replay=args.replay,
            shared_replies=args.shared_replies, concurrency=args.concurrency,
            limit=limit, seed=args.seed, output=out, embed=args.embedder,
            progress=lambda done, n, question: advance(1, one_line(question, 60)),
            settings={"llm": args.llm, **_generation_options(args), "offset": args.offset, **_routing(args)},
        )  # fmt: skip
    print(report.table())
    if report.cache is not None:
        hits, misses = report.cache["hits"], report.cache["misses"]
        where = report.cache["path"] or "the run's replies"
        print(f"\nLLM calls: {hits} replayed from {where}, {misses} made")
    html = out / "report.html"
    extra = f", {html}" if html.exists() else " (pip install 'selfrag[eval]' for report.html)"
    print(f"results: {out / 'results.jsonl'}, {out / 'summary.json'}{extra}")
    if args.fit_router:
        _fit_router(args, report, out)
    if args.baseline is None:
        return 0
    from selfrag_core.evaluation.gate import compare_runs, gate_report, regressions

    comparisons = compare_runs(report, args.baseline, seed=args.seed)
    print(f"\n{gate_report(comparisons)}")
    return 1 if regressions(comparisons) else 0


def _dry_run(args: argparse.Namespace, data: Any, names: list[str], rag: Any, index: str | None) -> int:
    """``selfrag eval --dry-run``: the expected LLM calls and input tokens, before any call."""
    from selfrag_core.evaluation.router import dry_run

    expected = dry_run(
        data, names, rag, corpus=args.corpus, index=index, embed=args.embedder, top_k=args.top_k,
        preset=preset_for(args.llm), **_routing(args),
    )  # fmt: skip
    n = len(data.questions)
    print(f"{data.name}: {n} question(s); expected before any LLM call (estimates: no model was called)")
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
        report, metric=args.fit_metric, holdout=args.holdout, seed=args.seed, call_budget=args.call_budget
    )
    path = fit.write(args.fit_router)
    print(f"\n{fit.table()}\nrouter: {path} (use it with --strategy adaptive --router {path})")
    summary = out / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text(encoding="utf-8"))
        data["router"] = {"path": str(path), **fit.figures()}
        summary.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


# ----------------------------------------------------------------------------- parser


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
    llm = _llm(args)
    strategies = {
        name: build_strategy(
            name, rag, llm, top_k=args.top_k, max_llm_calls=args.max_llm_calls, preset=preset_for(args.llm),
            **_routing(args),
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
        serve_workers("selfrag_core.cli:serve_app", args, args.workers)
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
    llm = _llm(args)
    strategies = {name: _strategy(args, name, rag, llm) for name in BUILT_IN}
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


def _version() -> str:
    from selfrag_core import __version__

    return __version__


#: ``selfrag ask``'s strategy unless --strategy says otherwise
DEFAULT_STRATEGY = "self"


def strategy_help() -> str:
    """``--strategy``'s help: the built-in strategies (``BUILT_IN``), those compared by default
    first, each with what it says of itself, then the strategies of your own."""
    names = sorted(BUILT_IN, key=lambda name: not BUILT_IN[name].compared)  # a stable sort
    about = {name: "default" if name == DEFAULT_STRATEGY else BUILT_IN[name].about for name in names}
    shown = [f"{name} ({about[name]})" if about[name] else name for name in names]
    return f"{', '.join(shown)}, or your own: package.module:Name or file.py:Name"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--index", metavar="DIR", help="index directory (default: $SELFRAG_INDEX or the user data dir)"
    )
    backend_opt = argparse.ArgumentParser(add_help=False)
    backend_opt.add_argument(
        "--backend", metavar="SPEC",
        help="where the documents live, winning over --index: an index directory, "
             "chroma://HOST:PORT/COLLECTION (a Chroma server; vectors from --embedder), or your own "
             "backend object: package.module:factory or file.py:factory (called with no arguments, or "
             "embedder=)",
    )  # fmt: skip
    common.add_argument("-v", "--verbose", action="store_true", help="log more (and list skipped files)")
    common.add_argument(
        "--plain", action="store_true",
        help=f"plain progress lines (count, rate, time left; every {PROGRESS_INTERVAL:g} s) instead of a bar",
    )  # fmt: skip
    llm_opts = argparse.ArgumentParser(add_help=False)
    llm_opts.add_argument(
        "--llm", default="local",
        help="local (SmolLM2, default), gemma, a .gguf path, fake (no model), openai:MODEL (an "
             "OpenAI-compatible server, see --llm-base-url), or provider:model",
    )  # fmt: skip
    llm_opts.add_argument(
        "--llm-base-url", metavar="URL",
        help="the OpenAI-compatible server of --llm openai:MODEL, e.g. http://localhost:8080/v1 "
             "(default $SELFRAG_LLM_BASE_URL, $OPENAI_BASE_URL; the key is $OPENAI_API_KEY)",
    )  # fmt: skip
    llm_opts.add_argument(
        "--llm-max-tokens", type=int, metavar="N",
        help="the longest reply, in tokens (default: the model's; 192 for the local models' answers, "
             "whose JSON replies keep their own cap, 512 for openai:MODEL)",
    )  # fmt: skip
    llm_opts.add_argument(
        "--llm-temperature", type=float, metavar="T",
        help="sampling temperature, >= 0 (default 0: deterministic; a provider:model keeps its own default)",
    )  # fmt: skip
    llm_opts.add_argument(
        "--threads",
        type=int,
        default=0,
        help="CPU threads of the local LLM (default: 2, or 1 on a busy machine)",
    )
    llm_opts.add_argument("--top-k", type=int, default=3, help="passages retrieved per search (default 3)")
    llm_opts.add_argument(
        "--max-llm-calls", type=int, default=12, help="LLM-call budget per question (default 12)"
    )
    timing = argparse.ArgumentParser(add_help=False)  # `serve` has its own --timeout (per request)
    timing.add_argument(
        "--llm-timeout", type=float, default=DEFAULT_LLM_TIMEOUT, metavar="SECONDS",
        help=f"seconds one LLM call may take (default {DEFAULT_LLM_TIMEOUT:g}; 0 for no limit)",
    )  # fmt: skip
    timing.add_argument(
        "--timeout", type=float, default=DEFAULT_QUERY_TIMEOUT, metavar="SECONDS",
        help=f"seconds one question may take (default {DEFAULT_QUERY_TIMEOUT:g}; 0 for no limit)",
    )  # fmt: skip
    routing = argparse.ArgumentParser(add_help=False)
    routing.add_argument(
        "--router", metavar="FILE",
        help=f"for {ADAPTIVE}: the router `selfrag eval --fit-router FILE` fitted on your questions "
             "(default: the rules: decompose a multi-part question, escalate an unsupported or "
             "incomplete answer)",
    )  # fmt: skip
    routing.add_argument(
        "--call-budget", type=float, metavar="CALLS",
        help=f"for {ADAPTIVE}: the most LLM calls a question is expected to cost (>= 1); it escalates only "
             "within it, and --max-llm-calls is capped at its ceiling",
    )  # fmt: skip
    new_index = argparse.ArgumentParser(add_help=False)
    new_index.add_argument(
        "--embedder", choices=EMBEDDERS, default="auto",
        help="for a new index: auto (MiniLM when installed, else lexical), minilm, hashing, none",
    )  # fmt: skip
    new_index.add_argument("--chunk-size", type=int, default=600, help="characters per chunk of a new index")

    parser = argparse.ArgumentParser(
        prog="selfrag", description="Self-improving RAG over your documents, offline."
    )
    parser.add_argument("--version", action="version", version=f"selfrag {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "index", parents=[common, backend_opt, new_index],
        help="index files and folders (into --index DIR, or --backend chroma://... or a factory's object)",
    )  # fmt: skip
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--encoding", help="encoding of files that are not UTF-8 (e.g. cp1252)")
    p.add_argument(
        "--keep-removed", action="store_true",
        help="keep the chunks of files gone from the folders indexed (default: they leave the index)",
    )  # fmt: skip
    p.set_defaults(func=cmd_index)
    p = sub.add_parser(
        "delete", parents=[common, backend_opt],
        help="remove indexed files or other sources from the index",
        description="Remove every chunk of each SOURCE: a file as `selfrag index` indexed it (its path; "
                    "a relative one is made absolute), or any other source name (e.g. one sent to "
                    "POST /documents). Exit 1 when one of them was not indexed.",
    )  # fmt: skip
    p.add_argument("sources", nargs="+", metavar="SOURCE")
    p.set_defaults(func=cmd_delete)
    p = sub.add_parser(
        "ask",
        parents=[common, backend_opt, llm_opts, timing, routing],
        help="answer a question from the index",
    )
    p.add_argument("question")
    p.add_argument(
        "--strategy", default=DEFAULT_STRATEGY, metavar="NAME", help=strategy_help(),
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.add_argument(
        "-q", "--quiet", action="store_true",
        help="no step lines on stderr (each retrieval, sub-question, verdict, attempt and fallback as it "
             "happens)",
    )  # fmt: skip
    p.set_defaults(func=cmd_ask)
    p = sub.add_parser(
        "demo",
        parents=[common, llm_opts, timing, new_index],
        help="index a sample corpus and run all strategies",
        description="Index the sample corpus shipped with the package and run the strategies on it. "
        "The demo keeps its own index (default: the user data dir's selfrag/demo-index, not "
        "$SELFRAG_INDEX), so it never mixes with yours; --index DIR puts it elsewhere.",
    )
    p.add_argument(
        "--questions", type=int, default=2, help="sample questions to run: 2 English (default), 3 adds Arabic"
    )
    p.add_argument(
        "--strategies", nargs="+", choices=STRATEGIES, help="strategies to run (default: all four)"
    )
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser(
        "eval", parents=[common, backend_opt, llm_opts, timing, routing],
        help="compare the strategies with a plain retrieve-and-answer on your questions",
    )  # fmt: skip
    p.add_argument("questions", help="questions: a .jsonl file, a BEIR folder or a SQuAD .json file")
    p.add_argument(
        "--corpus",
        help="documents to index for the run: a BEIR corpus.jsonl (default: the data's own, else --index)",
    )
    contenders = ",".join((BASELINE, *STRATEGIES))
    p.add_argument(
        "--strategies",
        default=contenders,
        metavar="NAMES",
        help=f"comma-separated contenders; {BASELINE} is the baseline (default: {contenders})",
    )
    p.add_argument("--k", type=int, default=10, help="documents counted by recall@k and MRR (default 10)")
    p.add_argument(
        "--limit", type=int, help="evaluate a seeded random sample of N questions (with --offset: the next N)"
    )
    p.add_argument(
        "--offset", type=int, metavar="N",
        help="take the questions in file order from the N-th on (0-based; with --limit L: N .. N+L-1) "
             "instead of a random sample: e.g. fit a router on some questions, report on others",
    )  # fmt: skip
    p.add_argument(
        "--fit-router", metavar="FILE",
        help=f"after the run, fit {ADAPTIVE}'s router on the contenders' per-question results (a held-out "
             "share reports its own row against plain and the best single strategy) and write it to FILE",
    )  # fmt: skip
    p.add_argument(
        "--holdout", type=float, default=0.3, metavar="SHARE",
        help="with --fit-router: the share of the questions held out from the fit (default 0.3)",
    )  # fmt: skip
    p.add_argument(
        "--fit-metric", metavar="NAME", help="with --fit-router: the metric to route for (default f1)"
    )
    p.add_argument(
        "--dry-run", action="store_true",
        help="print each contender's expected LLM calls and input tokens for the questions, then stop: "
             "no LLM call is made (retrievals run)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and of the bootstrap (default 0)")
    p.add_argument("--concurrency", type=int, default=2, help="questions answered at once (default 2)")
    p.add_argument(
        "--out", metavar="DIR", help="results.jsonl, summary.json, report.html (default eval-results/NAME)"
    )
    p.add_argument(
        "--cache",
        metavar="FILE",
        help="SQLite file of recorded LLM calls (default ~/.cache/selfrag/llm-calls.sqlite)",
    )
    p.add_argument("--no-cache", action="store_true", help="call the LLM every time, record nothing")
    p.add_argument(
        "--replay", action="store_true", help="answer only from the cache: a miss is an error (for CI)"
    )
    p.add_argument(
        "--baseline",
        metavar="RUN",
        help="an earlier run (its --out folder, summary.json or results.jsonl) to compare with question by "
        "question; exit 1 when a metric is significantly worse (its whole 95%% interval below zero)",
    )
    p.add_argument(
        "--shared-replies",
        action="store_true",
        help="one reply a prompt for every contender, as a deterministic model gives: a difference is "
        "the strategy's, not the model's run-to-run noise; reuses the baseline's recordings, then each "
        "contender's; latency then counts only each contender's own model calls",
    )
    p.add_argument(
        "--judge", action="store_true", help="also score faithfulness with the LLM (one more call per answer)"
    )
    p.add_argument(
        "--retrieval-only",
        action="store_true",
        help="rank documents instead of answering (plain and hyde); the default for data without answers",
    )
    p.add_argument(
        "--embedder", choices=EMBEDDERS, default="auto", help="embedder of the corpus index (default auto)"
    )
    p.set_defaults(func=cmd_eval)  # fmt: skip
    p = sub.add_parser("stats", parents=[common], help="describe the index")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)
    from selfrag_core.serve.server import add_arguments as add_serve_arguments  # imports no FastAPI

    p = sub.add_parser(
        "serve", parents=[common, backend_opt, llm_opts, routing, new_index],
        help="serve the strategies over HTTP (pip install 'selfrag[serve]')",
    )  # fmt: skip
    add_serve_arguments(p, shared=False)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser(
        "mcp", parents=[common, backend_opt, llm_opts, timing, routing, new_index],
        help="serve ask, search and add_documents as MCP tools over stdio (pip install 'selfrag[mcp]')",
        description="A Model Context Protocol server: the tools ask, search and add_documents, and "
        "each indexed source as a resource. Over stdio by default (an MCP client starts it); --http "
        "serves streamable HTTP at http://HOST:PORT/mcp, behind $SELFRAG_API_TOKEN as selfrag serve.",
    )  # fmt: skip
    p.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    p.add_argument(
        "--host", default="127.0.0.1", help="with --http: address to listen on (default 127.0.0.1)"
    )
    p.add_argument("--port", type=int, default=8000, help="with --http: port (default 8000)")
    p.set_defaults(func=cmd_mcp)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setLevel(logging.INFO if args.verbose else logging.WARNING)  # bm25s sets its logger to DEBUG
    logging.basicConfig(level=handler.level, format="%(levelname)s: %(message)s", handlers=[handler])
    try:
        _generation_options(args)  # a bad --llm-max-tokens / --llm-temperature fails before any work
        code: int = args.func(args)
    except (CLIError, RAGSystemError, ValueError) as e:  # typed library errors carry their fix
        print(f"selfrag: error: {e}", file=sys.stderr)
        return e.code if isinstance(e, CLIError) else 2
    except OSError as e:
        print(f"selfrag: error: {e.filename or ''} {e.strerror or e}; check the path and its permissions",
              file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        print("selfrag: interrupted; the index is unchanged unless a save had completed", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
