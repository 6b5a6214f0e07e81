"""A small bounded conversation memory for follow-up questions."""

from __future__ import annotations

import threading
from collections import deque

from selfrag_core.validation import check_int


class ConversationMemory:
    """The last ``max_turns`` (question, answer) pairs, oldest first. Thread-safe.

    ``history_text()`` renders them for a prompt, so a follow-up question ("and
    its population?") is answered with the conversation in view.
    """

    def __init__(self, max_turns: int = 5, *, max_answer_chars: int = 500) -> None:
        self.max_turns = check_int("max_turns", max_turns, 1)
        self.max_answer_chars = max_answer_chars
        self._turns: deque[tuple[str, str]] = deque(maxlen=max_turns)
        self._lock = threading.Lock()

    def add(self, question: str, answer: str) -> None:
        with self._lock:
            self._turns.append((question, answer))

    @property
    def turns(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._turns)

    def history_text(self) -> str:
        """The conversation as prompt text ending in a blank line, or "" when empty."""
        turns = self.turns
        if not turns:
            return ""
        lines = [f"Q: {q}\nA: {a[: self.max_answer_chars]}" for q, a in turns]
        return "Conversation so far:\n" + "\n".join(lines) + "\n\n"

    def clear(self) -> None:
        with self._lock:
            self._turns.clear()

    def __len__(self) -> int:
        return len(self.turns)
