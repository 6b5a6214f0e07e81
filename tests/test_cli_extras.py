"""A command whose extra is not installed says so in one line naming the extra, and exits
2 (issue #52: ``selfrag mcp`` printed a 15-line traceback, ``ModuleNotFoundError:
starlette``, from a module it imported before its own install hint). The missing
modules are simulated (``None`` in ``sys.modules``), in a subprocess: the test holds
whether or not the extras are installed here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: what each extra brings that the command imports (``mcp`` brings starlette too)
MISSING = {
    "mcp": ["mcp", "mcp_types", "starlette", "fastapi", "uvicorn"],
    "serve": ["fastapi", "starlette", "uvicorn", "mcp", "mcp_types"],
}
SCRIPT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # `import name` raises ModuleNotFoundError
from selfrag_core.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("command", ["mcp", "serve"])
def test_a_missing_extra_is_one_line_naming_it(command: str, tmp_path: Path) -> None:
    argv = [command, "--llm", "fake", "--index", str(tmp_path / "index"), "--embedder", "hashing"]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, ",".join(MISSING[command]), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("selfrag: error: ") and f"pip install 'selfrag[{command}]'" in lines[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "index").exists()  # the hint comes before any work
