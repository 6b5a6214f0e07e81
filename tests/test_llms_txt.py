"""The docs build's llms.txt (docs/hooks/llms_txt.py, an MkDocs hook): every page of the
nav, as a markdown link under its section, with a one-line note."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def hook() -> Any:
    spec = importlib.util.spec_from_file_location("llms_txt", ROOT / "docs" / "hooks" / "llms_txt.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nav_pages(items: list[Any]) -> list[str]:
    pages: list[str] = []
    for item in items:
        [(_, target)] = item.items() if isinstance(item, dict) else [(None, item)]
        pages += nav_pages(target) if isinstance(target, list) else [target]
    return pages


def test_llms_txt_lists_every_page_of_the_nav_as_a_markdown_link(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))
    assert any(str(h).endswith("llms_txt.py") for h in config["hooks"])  # the build runs it
    text = hook().llms_txt(config)
    lines = text.splitlines()
    assert lines[0] == f"# {config['site_name']}" and lines[2] == f"> {config['site_description']}"
    links = re.findall(r"^- \[([^\]]+)\]\(([^)]+)\)(: .+)?$", text, re.M)
    pages = nav_pages(config["nav"])
    assert len(links) == len(pages) and all(note for _, _, note in links)  # one line each, with a note
    base = config["site_url"].rstrip("/")
    urls = {url for _, url, _ in links}
    for page in pages:
        path = re.sub(r"(^|/)index\.md$", r"\1", page).removesuffix(".md")
        assert f"{base}/{path}/".replace(f"{base}//", f"{base}/") in urls, page
    assert "## How-to guides" in lines and "- [Send spans to a collector (OpenTelemetry)](" in text
    assert f"- [Home]({base}/): " in text

    # the build writes it at the site's root
    hook().on_post_build({**dict(config), "site_dir": str(tmp_path)})
    assert (tmp_path / "llms.txt").read_text(encoding="utf-8") == text


def test_a_note_is_the_first_sentence_of_prose_without_markup(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n```python\nx = 1\n```\n\nThe `engine` runs [plans](x.md) **once**. More text.\n",
        encoding="utf-8",
    )
    assert hook()._first_sentence(page) == "The engine runs plans once."
