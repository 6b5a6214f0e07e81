"""The files to index and their text, the index directory or backend, and the writes to it."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.ingest import Writer, ingest, writer
from selfrag_core.presets import backend_kind, open_backend
from selfrag_core.progress import Progress

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
_BATCH = 32  # files a write, to a backend other than the embedded index
#: chunks a write to the embedded index (the embedder is called a few of its batches at a
#: time within it, the longest chunks first, so the batch bounds only what one failure loses)
_BATCH_CHUNKS = 1024


class CLIError(Exception):
    """A one-line problem with its fix; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class SkipFile(Exception):
    """A file that cannot be indexed; the message names the problem and the fix."""


class EmptyFile(SkipFile):
    """A file with no text (0 bytes, or only whitespace): its old chunks leave the index."""


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
        raise EmptyFile("is empty; add text to it or leave it out")
    return text


@dataclass
class Indexed:
    """What :func:`index_paths` did: ``files`` read, ``added`` chunks newly stored, files
    ``skipped``, the ``problems`` of explicitly named files, and the chunks dropped per
    ``emptied`` file (one indexed before, empty now)."""

    files: int = 0
    added: int = 0
    skipped: int = 0
    problems: list[str] = field(default_factory=list)
    emptied: dict[str, int] = field(default_factory=dict)


def index_paths(
    rag: Any,
    gathered: Gathered,
    progress: Progress,
    *,
    encoding: str | None = None,
    verbose: bool = False,
    changed: bool = False,
    source: Callable[[Path], str] = lambda path: str(path.resolve()),
) -> Indexed:
    """Index the gathered files into ``rag`` (through :func:`~selfrag_core.ingest.ingest`),
    each under ``source(path)`` (its absolute path by default), and save it when anything
    changed (``changed``: something was deleted before). A file that is empty now has no
    text to replace its old chunks with: they are deleted, as a file's new text replaces
    them (``Indexed.emptied``; kept, with a warning, by a backend that cannot delete)."""
    docs: list[dict[str, Any]] = []
    out = Indexed(skipped=gathered.ignored)
    empty: list[str] = []
    store = _preparing(rag)
    prepared: dict[str, Any] = {}  # source -> its PreparedDocument (the embedded index's), in order
    if verbose:
        for path in gathered.ignored_files:
            progress.say(
                f"skipped: {path} ({path.suffix.lower()}: not read inside a folder; name the file to try it)"
            )
    with progress.task("reading files", len(gathered.files), "files") as advance:
        for path, explicit in gathered.files:
            try:
                doc = {"text": read_text(path, encoding), "source": source(path), "title": path.name}
                if store is not None:  # checked, chunked and tokenised now: its chunks are counted
                    try:
                        ready = store.prepare_many([doc])
                    except (TypeError, ValueError) as e:
                        raise SkipFile(f"cannot be indexed: {str(e).removeprefix('document 0: ')}") from e
                    prepared.pop(doc["source"], None)  # named twice: indexed once, where last named
                    prepared.update((d.source, d) for d in ready)
                docs.append(doc)
            except SkipFile as e:
                out.skipped += 1
                if isinstance(e, EmptyFile):
                    empty.append(source(path))
                if explicit:
                    out.problems.append(f"{path} {e}")
                if explicit or verbose:
                    progress.say(f"skipped: {path} {e}")
            advance()
    out.emptied = _drop_emptied(writer(rag), empty, progress)
    changed = changed or any(out.emptied.values())
    out.files = len(docs)
    if store is not None:
        out.added = _add_prepared(store, list(prepared.values()), progress, changed)
        return out
    # the save is atomic, under the index's lock, over whatever another writer saved meanwhile
    with progress.task("indexing", len(docs), "files") as advance:
        report = ingest(rag, docs, batch_size=_BATCH, save=True, progress=advance)
    if changed and not report.saved:
        writer(rag).save()
    out.added = report.chunks or 0
    return out


def _preparing(rag: Any) -> Any:
    """``rag`` when it prepares documents before adding them (the embedded index:
    ``prepare_many`` and ``add_prepared``), else None (written through ``ingest``)."""
    ready = all(callable(getattr(rag, name, None)) for name in ("prepare_many", "add_prepared", "save"))
    return rag if ready else None


def _add_prepared(store: Any, docs: list[Any], progress: Progress, changed: bool) -> int:
    """Add the prepared documents to the embedded index in batches of about
    :data:`_BATCH_CHUNKS` chunks, the progress counting chunks as each embedder call ends
    (a few of its batches), then save when anything changed (``changed``: something was
    deleted before); what earlier batches added is saved even when a later one raises.
    The chunks added."""
    added = 0
    try:
        with progress.task("indexing", sum(len(d.chunks) for d in docs), "chunks") as advance:
            for batch in _chunk_batches(docs, _BATCH_CHUNKS):
                added += store.add_prepared(batch, progress=advance)
    finally:
        if added or changed:  # atomic, under the index's lock, over whatever another writer saved
            store.save()
    return added


def _chunk_batches(docs: list[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive documents, in batches of at least ``size`` chunks (the last one fewer)."""
    batch: list[Any] = []
    chunks = 0
    for doc in docs:
        batch.append(doc)
        chunks += len(doc.chunks)
        if chunks >= size:
            yield batch
            batch, chunks = [], 0
    if batch:
        yield batch


def _drop_emptied(w: Writer, sources: list[str], progress: Progress) -> dict[str, int]:
    """The chunks deleted per source of an emptied file that was indexed."""
    if not sources:
        return {}
    if w.can_list:
        indexed = set(w.sources())
        sources = [s for s in sources if s in indexed]
    if sources and not w.can_delete:
        progress.say(
            f"kept: the old chunks of {len(sources)} emptied file(s) ({w.name} cannot delete by source)"
        )
        return {}
    return {s: n for s, n in delete_sources(w, sources).items() if n}


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
