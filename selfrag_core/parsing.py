"""One tolerant parser for model output.

Models wrap JSON in code fences, add prose around it, use single quotes or trailing
commas, or wrap a list in ``{"items": [...]}``. ``parse_json`` copes with all of
these and raises :class:`ParseError` (keeping the raw text) when nothing parses.
``parse_list`` adds a regex fallback for numbered or bulleted lists. Model output is
never evaluated as code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from selfrag_core.errors import ParseError

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_LIST_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*•]|\(\d+\))\s+(.+?)\s*$", re.MULTILINE)


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


def parse_json(text: str) -> Any:
    """Parse the first JSON value found in model output. Raises ParseError."""
    if not isinstance(text, str):
        raise ParseError(f"expected text to parse, got {type(text).__name__}", raw=str(text))
    whole = text.strip()
    if whole[:1] in ("{", "["):  # a JSON-mode reply, the usual case: whole, before any search
        try:
            return json.loads(whole, strict=False)
        except ValueError:
            pass
    for candidate in _candidates(text):
        for variant in _variants(candidate):
            try:
                return json.loads(variant, strict=False)
            except ValueError:
                continue
    raise ParseError("model output holds no parsable JSON", raw=text)


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


def parse_list(text: str, *, keys: tuple[str, ...] = ("items", "questions", "sub_questions")) -> list[str]:
    """Parse a list of strings: a JSON list, an object wrapping one, or a
    numbered / bulleted list (regex fallback). Returns [] when nothing is found."""
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
    return [m.strip().strip('"').strip() for m in _LIST_ITEM.findall(text) if m.strip()]
