"""Fixtures for the documentation's code blocks (``pytest --markdown-docs docs/``).

Each block runs in a fresh temporary directory, so the files the tutorial writes
(notes, an index, a recording) never land in the repository, and with no model: the
examples use the fake LLM (``make_llm("fake")``, ``selfrag_core.testing.FakeLLM``) or a
framework's own fake model.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _in_a_temporary_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SELFRAG_INDEX", str(tmp_path / "index"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
