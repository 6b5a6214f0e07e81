"""Tests across processes: real servers (Chroma, an OpenAI-compatible model server) on
loopback and ``selfrag serve`` replicas over them. A package, so ``servers`` is importable
as ``integration.servers`` from the other test modules (``tests/`` is on the path)."""
