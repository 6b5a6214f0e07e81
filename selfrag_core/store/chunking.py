"""Chunkers: split a document into overlapping pieces of about ``chunk_size`` characters.

* ``recursive`` (default): split on paragraphs, then lines, sentences, words, and
  characters only as a last resort; merge the pieces back up to ``chunk_size``.
* ``character``: fixed windows of ``chunk_size`` stepping ``chunk_size - chunk_overlap``.
* ``markdown``: one section per heading (the heading path goes into the chunk's
  ``section`` metadata), each section chunked recursively.
* ``code``: recursive on top-level definitions (``class``, ``def``, ``function``...)
  before blank lines and lines.
* ``hierarchical``: parents of ``4 * chunk_size``, each split into children of
  ``chunk_size``; every child carries ``parent`` (the parent's number) and the
  parent's character span, so a caller can widen a hit to its parent.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from selfrag_core.errors import ConfigurationError
from selfrag_core.validation import check_int

CHUNKERS = ("recursive", "character", "markdown", "code", "hierarchical")

_TEXT_SEPARATORS = ("\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ", "")
_CODE_SEPARATORS = (
    "\nclass ", "\ndef ", "\nasync def ", "\nfunction ", "\nfunc ", "\nfn ", "\npub fn ",
    "\n    def ", "\n    async def ", "\n\n", "\n", " ", "",
)  # fmt: skip
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


@dataclass
class TextChunk:
    """One piece of a document: its text, position and metadata."""

    text: str
    index: int
    start: int
    end: int
    metadata: dict[str, Any] = field(default_factory=dict)


Span = tuple[int, int]


def _split(text: str, start: int, end: int, size: int, seps: Sequence[str]) -> list[Span]:
    """Spans of ``text[start:end]``, each at most ``size`` long, cut at the first separator that helps."""
    if end - start <= size:
        return [(start, end)]
    for i, sep in enumerate(seps):
        if sep == "":
            return [(s, min(s + size, end)) for s in range(start, end, size)]
        if text.find(sep, start, end) < 0:
            continue
        # a keyword separator ("\ndef ") starts the next piece; others ("\n\n", ". ") end this one
        keep = 1 if sep[0] == "\n" and sep.strip() else len(sep)
        spans: list[Span] = []
        pos = start
        while pos < end:
            cut = text.find(sep, pos + 1, end)
            stop = end if cut < 0 else cut + keep
            spans.extend(_split(text, pos, stop, size, seps[i + 1 :]))
            pos = stop
        return spans
    return [(start, end)]  # pragma: no cover - "" is always the last separator


def _merge(pieces: list[Span], size: int, overlap: int) -> list[Span]:
    """Join consecutive pieces into spans of at most ``size``, repeating about ``overlap`` chars."""
    chunks: list[Span] = []
    window: list[Span] = []
    for piece in pieces:
        if window and piece[1] - window[0][0] > size:
            chunks.append((window[0][0], window[-1][1]))
            while window and (window[-1][1] - window[0][0] > overlap or piece[1] - window[0][0] > size):
                window.pop(0)
        window.append(piece)
    if window:
        chunks.append((window[0][0], window[-1][1]))
    return chunks


def _stripped(text: str, span: Span) -> Span | None:
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


class Chunker:
    """Splits text with one of :data:`CHUNKERS`; ``chunk(text, **metadata)`` returns TextChunks."""

    def __init__(self, strategy: str = "recursive", chunk_size: int = 1000, chunk_overlap: int = 200) -> None:
        if strategy not in CHUNKERS:
            raise ConfigurationError(f"unknown chunker {strategy!r}; choose one of {list(CHUNKERS)}")
        check_int("chunk_size", chunk_size, 20)
        check_int("chunk_overlap", chunk_overlap, 0)
        if chunk_overlap >= chunk_size:
            raise ConfigurationError(
                f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size})"
            )
        self.strategy = strategy
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap

    def settings(self) -> dict[str, Any]:
        return {"chunker": self.strategy, "chunk_size": self.chunk_size, "chunk_overlap": self.chunk_overlap}

    def _recursive(self, text: str, start: int, end: int, seps: Sequence[str], size: int = 0) -> list[Span]:
        size = size or self.chunk_size
        overlap = min(self.chunk_overlap, size // 2)
        return _merge(_split(text, start, end, size, seps), size, overlap)

    def spans(self, text: str) -> list[tuple[Span, dict[str, Any]]]:
        """Character spans of the chunks of ``text`` with per-chunk metadata."""
        n = len(text)
        if self.strategy == "character":
            step = self.chunk_size - self.chunk_overlap
            starts = range(0, max(n - self.chunk_overlap, 1), step)
            return [((s, min(s + self.chunk_size, n)), {}) for s in starts]
        if self.strategy == "code":
            return [(s, {}) for s in self._recursive(text, 0, n, _CODE_SEPARATORS)]
        if self.strategy == "markdown":
            return self._markdown(text)
        if self.strategy == "hierarchical":
            out: list[tuple[Span, dict[str, Any]]] = []
            parents = self._recursive(text, 0, n, _TEXT_SEPARATORS, size=4 * self.chunk_size)
            for p, (ps, pe) in enumerate(parents):
                meta = {"parent": p, "parent_start": ps, "parent_end": pe}
                out.extend((s, dict(meta)) for s in self._recursive(text, ps, pe, _TEXT_SEPARATORS))
            return out
        return [(s, {}) for s in self._recursive(text, 0, n, _TEXT_SEPARATORS)]

    def _markdown(self, text: str) -> list[tuple[Span, dict[str, Any]]]:
        heads = list(_HEADING.finditer(text))
        bounds = [0] + [m.start() for m in heads if m.start() > 0] + [len(text)]
        path: list[tuple[int, str]] = []
        out: list[tuple[Span, dict[str, Any]]] = []
        for start, end in itertools.pairwise(bounds):
            head = _HEADING.match(text, start)
            if head is not None:
                level = len(head.group(1))
                path = [(lvl, title) for lvl, title in path if lvl < level] + [(level, head.group(2))]
            meta = {"section": " > ".join(title for _, title in path)} if path else {}
            out.extend((s, dict(meta)) for s in self._recursive(text, start, end, _TEXT_SEPARATORS))
        return out

    def chunk(self, text: str, **metadata: Any) -> list[TextChunk]:
        """Split ``text``; every chunk gets ``metadata`` plus its own (section, parent...)."""
        chunks: list[TextChunk] = []
        for span, extra in self.spans(text):
            tight = _stripped(text, span)
            if tight is None:
                continue
            s, e = tight
            chunks.append(TextChunk(text[s:e], len(chunks), s, e, {**metadata, **extra}))
        return chunks
