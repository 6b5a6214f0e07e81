"""One tolerant parser for model output.

Models wrap JSON in code fences, add prose around it, use single quotes or trailing
commas, or wrap a list in ``{"items": [...]}``. ``parse_json`` copes with all of
these and raises :class:`ParseError` (keeping the raw text) when nothing parses.
``parse_list`` adds a line-by-line fallback for numbered or bulleted lists. Model
output is never evaluated as code.

Hostile output cannot hurt: only the first :data:`MAX_PARSE_CHARS` characters are
read (a reply that babbles on after its JSON still parses), at most
:data:`MAX_CANDIDATES` candidate texts are tried, every pass over the text is linear
(no regular expression can backtrack over an unbounded run), and JSON nested deeper
than :data:`MAX_DEPTH` is unreadable. The model-output parsers raise nothing but
:class:`ParseError`.

``load_json`` is the strict reader under them, shared by every reader of JSON files and
lines (the store, ``selfrag eval``'s loaders): malformed or hostile JSON (nested past the
recursion limit, an integer past the digit limit) is a ``ValueError``, nothing else.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import Iterator
from typing import Any

from selfrag_core.errors import ParseError

#: model output is cut to its first MAX_PARSE_CHARS characters before it is parsed
MAX_PARSE_CHARS = 100_000
#: parsed JSON nested deeper than this (lists and objects) is unreadable
MAX_DEPTH = 100
#: candidate texts (fences, the whole text, bracketed spans) tried before giving up
MAX_CANDIDATES = 64

_FENCE = re.compile(r"```(?:json|JSON)?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_LIST_MARKER = re.compile(r"(?:\d+[.)]|[-*•]|\(\d+\))\s")  # matched at the start of a stripped line
_UNREADABLE = object()


def _balanced_spans(text: str) -> list[str]:
    """Every top-level ``{...}`` / ``[...]`` span, respecting strings."""
    spans, depth, start, in_str, esc, quote = [], 0, -1, False, False, ""
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
            continue
        if ch in "\"'" and depth > 0:
            # apostrophes inside words are not string delimiters
            if ch == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < len(text) and text[i + 1].isalnum():
                continue
            in_str, quote = True, ch
        elif ch in "{[":
            if depth == 0:
                start = i
            depth += 1
        elif ch in "}]" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def _single_to_double(text: str) -> str:
    """Convert single-quoted JSON-ish text to double quotes (outside double strings)."""
    out, in_double, in_single, esc = [], False, False, False
    for i, ch in enumerate(text):
        if esc:
            out.append(ch)
            esc = False
            continue
        if ch == "\\":
            if text[i + 1 : i + 2] != "'":  # \' needs no escape in JSON
                out.append(ch)
            esc = True
            continue
        if ch == '"' and not in_single:
            in_double = not in_double
        elif ch == '"' and in_single:
            out.append('\\"')
            continue
        elif ch == "'" and not in_double:
            prev, nxt = text[i - 1 : i], text[i + 1 : i + 2]
            if in_single and prev.isalnum() and nxt.isalnum():
                out.append(ch)  # apostrophe inside a single-quoted string
                continue
            in_single = not in_single
            out.append('"')
            continue
        out.append(ch)
    return "".join(out)


def _variants(candidate: str) -> Iterator[str]:
    """The candidate as it is, then progressively repaired (computed lazily)."""
    yield candidate
    fixed = _TRAILING_COMMA.sub(r"\1", candidate)
    yield fixed
    double = _single_to_double(fixed)
    yield double
    yield re.sub(r"\bTrue\b", "true", re.sub(r"\bFalse\b", "false", re.sub(r"\bNone\b", "null", double)))


def _candidates(text: str) -> Iterator[str]:
    sources = [m.strip() for m in _FENCE.findall(text)] + [text.strip()]
    yield from sources
    for source in sources:
        yield from _balanced_spans(source)


def _nested_within(value: Any, limit: int) -> bool:
    """Whether the lists and objects of ``value`` nest at most ``limit`` deep (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return False
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return True


def load_json(text: str, *, strict: bool = True) -> Any:
    """The JSON value of ``text``. Raises ``ValueError`` and nothing else: a
    :class:`json.JSONDecodeError` for malformed JSON, a plain ``ValueError`` for an
    integer past Python's digit limit or for JSON nested past the interpreter's recursion
    limit (which :func:`json.loads` raises as ``RecursionError``). ``strict=False`` allows
    control characters inside strings."""
    try:
        return json.loads(text, strict=strict)
    except json.JSONDecodeError:
        raise
    except ValueError as e:  # int() of a number past the digit limit: the one other ValueError
        raise ValueError(f"an integer longer than {sys.get_int_max_str_digits()} digits") from e
    except RecursionError as e:
        raise ValueError("nested deeper than the interpreter's recursion limit") from e


def _loads(text: str) -> Any:
    """The JSON value of ``text``, or ``_UNREADABLE``: unreadable to :func:`load_json`, or
    nested past ``MAX_DEPTH``."""
    try:
        value = load_json(text, strict=False)
    except ValueError:
        return _UNREADABLE
    return value if _nested_within(value, MAX_DEPTH) else _UNREADABLE


def parse_json(text: str) -> Any:
    """Parse the first JSON value found in model output (in its first ``MAX_PARSE_CHARS``
    characters). Raises ParseError, and nothing else."""
    if not isinstance(text, str):
        raise ParseError(f"expected text to parse, got {type(text).__name__}", raw=str(text))
    head = text[:MAX_PARSE_CHARS]
    whole = head.strip()
    if whole[:1] in ("{", "["):  # a JSON-mode reply, the usual case: whole, before any search
        value = _loads(whole)
        if value is not _UNREADABLE:
            return value
    for candidate in itertools.islice(_candidates(head), MAX_CANDIDATES):
        for variant in _variants(candidate):
            value = _loads(variant)
            if value is not _UNREADABLE:
                return value
    cut = len(text) > MAX_PARSE_CHARS
    read = f" in its first {MAX_PARSE_CHARS} of {len(text)} characters" if cut else ""
    raise ParseError(f"model output holds no parsable JSON{read}", raw=text)


def parse_json_object(text: str) -> dict[str, Any]:
    """Parse a JSON object; a list is accepted only inside an object. Raises ParseError."""
    value = parse_json(text)
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        value = value[0]
    if not isinstance(value, dict):
        raise ParseError(f"expected a JSON object, got {type(value).__name__}", raw=text)
    return value


def _strings(items: list[Any]) -> list[str]:
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(item.strip())
        elif isinstance(item, dict):
            for key in ("question", "sub_question", "text", "query", "item"):
                if isinstance(item.get(key), str):
                    out.append(item[key].strip())
                    break
    return [s for s in out if s]


def _list_items(text: str) -> list[str]:
    """The items of the lines numbered or bulleted as "1. ", "2) ", "(3) ", "- ", "* " or "• "."""
    lines = (line.strip() for line in text.splitlines())
    items = (line[m.end() :].strip().strip('"').strip() for line in lines if (m := _LIST_MARKER.match(line)))
    return [item for item in items if item]


def parse_list(text: str, *, keys: tuple[str, ...] = ("items", "questions", "sub_questions")) -> list[str]:
    """Parse a list of strings: a JSON list, an object wrapping one, or a
    numbered / bulleted list (line by line). Returns [] when nothing is found; raises
    nothing (``text`` that is not a str finds nothing either)."""
    try:
        value = parse_json(text)
    except ParseError:
        value = None
    if isinstance(value, dict):
        for key in keys:
            if isinstance(value.get(key), list):
                return _strings(value[key])
        lists = [v for v in value.values() if isinstance(v, list)]
        if lists:
            return _strings(lists[0])
    if isinstance(value, list):
        return _strings(value)
    return _list_items(text[:MAX_PARSE_CHARS]) if isinstance(text, str) else []
