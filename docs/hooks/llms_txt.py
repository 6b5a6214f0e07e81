"""An MkDocs hook that writes ``llms.txt`` (https://llmstxt.org) into the built site: the
site's title and description, then each section of the nav as a list of markdown links to
its pages, each with the first sentence of the page as its note. Coding assistants read it
to find the documentation's pages.

Registered in ``mkdocs.yml`` (``hooks: [docs/hooks/llms_txt.py]``); ``llms_txt(config)``
gives the text without building.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: the file's name in the built site
LLMS_TXT = "llms.txt"
_MARKUP = re.compile(r"!?\[([^\]]*)\]\([^)]*\)|[`*]")  # links keep their text; code and bold marks go


def llms_txt(config: Any) -> str:
    """The ``llms.txt`` of the site that ``config`` (MkDocs' config, or a mapping with
    ``site_name``, ``site_description``, ``site_url``, ``docs_dir``, ``nav``) describes."""
    base = str(config.get("site_url") or "").rstrip("/")
    lines = [f"# {config['site_name']}", ""]
    if config.get("site_description"):
        lines += [f"> {config['site_description']}", ""]
    loose: list[str] = []  # pages at the nav's top level
    sections: list[tuple[str, list[str]]] = []
    for item in config.get("nav") or []:
        title, target = _entry(item)
        if isinstance(target, list):
            sections.append((title, [_link(t, p, base, config["docs_dir"]) for t, p in _pages(target)]))
        elif target is not None:
            loose.append(_link(title, target, base, config["docs_dir"]))
    for title, links in [("Docs", loose), *sections]:
        if links:
            lines += [f"## {title}", "", *links, ""]
    return "\n".join(lines)


def on_post_build(config: Any, **kwargs: Any) -> None:
    """MkDocs' hook: write ``llms.txt`` at the root of the built site."""
    Path(config["site_dir"], LLMS_TXT).write_text(llms_txt(config), encoding="utf-8")


def _entry(item: Any) -> tuple[str, Any]:
    """A nav item as (title, page path or list of items)."""
    if isinstance(item, dict):
        [(title, target)] = item.items()
        return str(title), target
    return Path(str(item)).stem, str(item)


def _pages(items: list[Any]) -> list[tuple[str, str]]:
    """The pages of a nav section, nested sections flattened in order."""
    found: list[tuple[str, str]] = []
    for item in items:
        title, target = _entry(item)
        found += _pages(target) if isinstance(target, list) else [(title, str(target))]
    return found


def _link(title: str, page: str, base: str, docs_dir: str) -> str:
    if "://" in page:  # an external link in the nav
        return f"- [{title}]({page})"
    url = re.sub(r"(^|/)index\.md$", r"\1", page)
    url = re.sub(r"\.md$", "/", url)
    note = _first_sentence(Path(docs_dir, page))
    return f"- [{title}]({base}/{url})" + (f": {note}" if note else "")


def _first_sentence(path: Path) -> str:
    """The first sentence of the page's first paragraph of prose (no heading, code, list or table)."""
    paragraph: list[str] = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if text.startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or text.startswith(("#", "|", "-", "*", ">", "!!!", "<", ":::")) or not text:
            if paragraph:
                break
            continue
        paragraph.append(text)
    prose = _MARKUP.sub(lambda m: m.group(1) or "", " ".join(paragraph))
    match = re.match(r"(.+?[.!?])(\s|$)", prose)
    sentence = match.group(1) if match else prose
    return sentence if len(sentence) <= 200 else sentence[:200].rsplit(" ", 1)[0] + " ..."
