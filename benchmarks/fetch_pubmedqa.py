"""Fetches PubMedQA's 1,000 expert-labelled questions (Jin et al., 2019; the public
repository ``pubmedqa/pubmedqa``, ``data/ori_pqal.json``) as a question set for
``selfrag eval``: a yes/no (or maybe) question on a PubMed abstract, its gold long answer
(the abstract's conclusion) and its gold decision. Never committed; a set nobody here
tunes on: report on it, never fit on it.

    .venv/bin/python benchmarks/fetch_pubmedqa.py data/pubmedqa
    .venv/bin/selfrag eval data/pubmedqa/questions.jsonl --corpus data/pubmedqa/corpus.jsonl --limit 50

Writes ``questions.jsonl`` (``id``, ``question``, ``answers``: the long answer,
``decision``: yes, no or maybe, ``relevant``: the abstract) and ``corpus.jsonl`` (one
BEIR document per abstract: its sections joined, the conclusion left out, as the
question's evidence). ``PUBMEDQA_REPO``: a git copy of the repository to read (a clone
or a bare mirror); else ``../.mirror/pubmedqa+pubmedqa/repo`` when present, else it is
cloned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _source(out: Path) -> Path:
    given = os.environ.get("PUBMEDQA_REPO")
    for guess in filter(None, (given, "../.mirror/pubmedqa+pubmedqa/repo", str(out / ".repo"))):
        if Path(guess).is_dir():
            return Path(guess)
    target = out / ".repo"
    subprocess.run(
        [
            "git",
            "clone",
            "--quiet",
            "--bare",
            "--depth",
            "1",
            "https://github.com/pubmedqa/pubmedqa",
            str(target),
        ],
        check=True,
    )
    return target


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: fetch_pubmedqa.py DIR")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    raw = subprocess.run(
        ["git", "-C", str(_source(out)), "show", "HEAD:data/ori_pqal.json"], check=True, capture_output=True
    ).stdout
    records = json.loads(raw)
    with (
        (out / "questions.jsonl").open("w", encoding="utf-8") as questions,
        (out / "corpus.jsonl").open("w", encoding="utf-8") as corpus,
    ):
        for pmid, r in records.items():
            corpus.write(json.dumps({"_id": pmid, "title": "", "text": " ".join(r["CONTEXTS"])}) + "\n")
            line = {
                "id": pmid,
                "question": r["QUESTION"],
                "answers": [r["LONG_ANSWER"]],
                "decision": r["final_decision"],
                "relevant": {pmid: 1},
            }
            questions.write(json.dumps(line) + "\n")
    print(f"{len(records)} questions and abstracts in {out}")


if __name__ == "__main__":
    main()
