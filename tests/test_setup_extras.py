"""The README's fresh-machine set-up leaves ``selfrag serve`` and ``selfrag mcp``
installed (issue #52: it installed the local models only, so both commands then failed
on their missing extra): ``scripts/setup-local.sh``'s default extras hold theirs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def default_extras() -> list[str]:
    script = (ROOT / "scripts" / "setup-local.sh").read_text(encoding="utf-8")
    found = re.search(r'^EXTRAS="\$\{1:-([^}]*)\}"$', script, re.MULTILINE)
    assert found, 'setup-local.sh sets EXTRAS="${1:-...}"'
    return found.group(1).split(",")


def test_the_setup_scripts_default_extras_install_serve_and_mcp() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    chosen = default_extras()
    assert {"local", "serve", "mcp"} <= set(chosen)
    assert set(chosen) <= set(extras), set(chosen) - set(extras)
    names = {e: {re.split(r"[<>=!\[ ;]", r, maxsplit=1)[0].lower() for r in extras[e]} for e in chosen}
    assert {"fastapi", "uvicorn"} <= names["serve"] and "mcp" in names["mcp"]  # what the commands import


@pytest.mark.parametrize("page", ["README.md", "docs/index.md", "docs/tutorial.md"])
def test_the_fresh_machine_set_up_runs_the_script_with_its_defaults(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    assert "bash scripts/setup-local.sh && .venv/bin/selfrag demo" in text
