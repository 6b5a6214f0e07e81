"""``selfrag eval --ray`` and ``selfrag index --ray`` on a local 2-CPU Ray cluster (slow:
a cluster starts; skipped without Ray, failed instead under ``SELFRAG_RAY_TESTS=required``,
as ``.ci/run`` sets it). The commands are the ones ``docs/how-to/ray.md`` shows, with the
scripted fake LLM (``--llm fake``) and the hashing embedder: the run takes seconds."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selfrag_core.cli import main

ROOT = Path(__file__).resolve().parents[1]
PLACES = {f"animal{i}": f"Place{i}" for i in range(10)}


def ray_or_skip() -> Any:
    try:
        import ray
    except ImportError:
        if os.environ.get("SELFRAG_RAY_TESTS") == "required":
            pytest.fail("ray is not installed (SELFRAG_RAY_TESTS=required): pip install 'selfrag[ray]'")
        pytest.skip("ray is not installed: pip install 'selfrag[ray]'")
    return ray


def write_data(folder: Path) -> tuple[Path, Path]:
    corpus, questions = folder / "corpus.jsonl", folder / "questions.jsonl"
    with corpus.open("w", encoding="utf-8") as f:
        for i, (a, p) in enumerate(PLACES.items()):
            f.write(json.dumps({"_id": f"d{i}", "title": a, "text": f"The {a} lives in {p}."}) + "\n")
    with questions.open("w", encoding="utf-8") as f:
        for i, (a, p) in enumerate(PLACES.items()):
            line = {"id": a, "question": f"Where does the {a} live?", "answers": [p], "relevant": [f"d{i}"]}
            f.write(json.dumps(line) + "\n")
    return questions, corpus


def results(out: Path) -> dict[str, dict[str, Any]]:
    """results.jsonl by question id, each record without its timings (a run's own)."""
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    ids = [line["id"] for line in lines]
    assert len(ids) == len(set(ids)), "a question recorded twice"
    for line in lines:
        for record in line["results"].values():
            record.pop("latency_s")
            record.pop("timeline")
    return {line["id"]: line["results"] for line in lines}


def test_without_ray_the_flag_is_one_line_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    questions, corpus = write_data(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray: ImportError
    args = ["eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--no-cache", "--ray"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'selfrag[ray]'" in err
    assert main(["index", str(corpus), "--index", str(tmp_path / "i"), "--ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install 'selfrag[ray]'" in err


def test_a_missing_ray_is_skipped_unless_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.delenv("SELFRAG_RAY_TESTS", raising=False)
    with pytest.raises(pytest.skip.Exception):
        ray_or_skip()
    monkeypatch.setenv("SELFRAG_RAY_TESTS", "required")
    with pytest.raises(pytest.fail.Exception, match="SELFRAG_RAY_TESTS=required"):
        ray_or_skip()


def test_nothing_in_the_core_imports_ray_at_module_level() -> None:
    import subprocess

    code = (  # every module of the core that imports here (an optional extra missing skips one)
        "import importlib, pkgutil, sys, selfrag_core\n"
        "for m in pkgutil.walk_packages(selfrag_core.__path__, 'selfrag_core.'):\n"
        "    if m.name.endswith('__main__'): continue\n"
        "    try: importlib.import_module(m.name)\n"
        "    except ImportError: pass\n"
        "assert {'selfrag_core.evaluation.ray', 'selfrag_core.cli.ray_index'} <= set(sys.modules)\n"
        "print('ray' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


@pytest.fixture(autouse=True)
def bounded() -> Iterator[None]:
    """Each test stopped after 4 minutes (a hung cluster fails the test, never the run)."""

    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError("the Ray test ran past 4 minutes")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(240)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A local Ray cluster of 2 CPUs, small, for this module's tests."""
    ray = ray_or_skip()
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ray.init(
        num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024 * 1024, log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )  # fmt: skip
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_eval_on_ray_replays_the_local_run_question_by_question(cluster: Any, tmp_path: Path) -> None:
    questions, corpus = write_data(tmp_path)
    cache = tmp_path / "llm-calls.sqlite"
    args = ["eval", str(questions), "--corpus", str(corpus), "--llm", "fake", "--embedder", "hashing",
            "--strategies", "plain,hyde,self", "--cache", str(cache), "--plain"]  # fmt: skip
    assert main([*args, "--ray", "--out", str(tmp_path / "recorded")]) == 0  # recorded through the workers
    assert main([*args, "--replay", "--out", str(tmp_path / "local")]) == 0  # the driver wrote every call
    assert main([*args, "--replay", "--ray", "--ray-workers", "2", "--out", str(tmp_path / "ray")]) == 0
    local, ray = results(tmp_path / "local"), results(tmp_path / "ray")
    assert list(local) == list(PLACES) or set(local) == set(PLACES)
    assert ray == local  # every question, every contender: the same answers, sources, metrics, calls
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text(encoding="utf-8"))
    assert summary["cache"]["misses"] == 0 and summary["cache"]["hits"] > 0
    executor = summary["settings"]["executor"]
    assert executor["kind"] == "ray" and executor["workers"] == 2
    # shared replies through the workers: borrowed from the recordings, nothing made
    assert main([*args, "--replay", "--shared-replies", "--ray", "--out", str(tmp_path / "shared")]) == 0
    shared = json.loads((tmp_path / "shared" / "summary.json").read_text(encoding="utf-8"))
    assert shared["cache"]["misses"] == 0 and shared["cache"]["contenders"]["hyde"]["borrowed"] > 0
    assert (tmp_path / "ray" / "report.html").exists() or "matplotlib" not in sys.modules


class Dying:
    """The fake LLM, whose process dies (once in the run: ``marker`` is created) on the
    first prompt naming ``victim``."""

    def __init__(self, victim: str, marker: str) -> None:
        from selfrag_core.local.factory import fake_llm

        self.inner, self.victim, self.marker = fake_llm(), victim, marker

    def _maybe_die(self, prompt: str) -> None:
        if self.victim in prompt:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return
            os._exit(1)  # the worker process dies mid-question

    def generate(self, prompt: str) -> Any:
        self._maybe_die(prompt)
        return self.inner.generate(prompt)

    def generate_structured(self, prompt: str, schema: dict[str, Any]) -> Any:
        self._maybe_die(prompt)
        return self.inner.generate_structured(prompt, schema)


def dying_parts(victim: str, marker: str, index: str) -> tuple[Any, Any, Any]:
    from selfrag_core.presets import open_index

    return Dying(victim, marker), open_index(Path(index), create=False), None


@pytest.mark.slow
def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(cluster: Any, tmp_path: Path) -> None:
    import functools

    from ray import cloudpickle

    from selfrag_core.evaluation import EvalSettings, evaluate
    from selfrag_core.evaluation.data import load_corpus
    from selfrag_core.evaluation.ray import RayExecutor
    from selfrag_core.evaluation.runner import index_corpus
    from selfrag_core.local.factory import fake_llm

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this file
    questions, corpus = write_data(tmp_path)
    index = tmp_path / "index"
    index_corpus(load_corpus(corpus), index, embed="hashing", save=True)
    names = ["plain", "hyde"]
    local = evaluate(
        questions, names, llm=fake_llm(), index=index,
        settings=EvalSettings(output=tmp_path / "local", concurrency=2),
    )  # fmt: skip
    marker = tmp_path / "died"
    executor = RayExecutor(functools.partial(dying_parts, "animal4", str(marker), str(index)), workers=2)
    ray_report = evaluate(
        questions, names, llm=fake_llm(), index=index, settings=EvalSettings(output=tmp_path / "ray"),
        executor=executor,
    )  # fmt: skip
    assert marker.exists() and executor.restarts >= 1  # a worker died, its question(s) queued again
    assert results(tmp_path / "ray") == results(tmp_path / "local")  # each question once, all there
    assert all(r is not None for r in ray_report.results) and len(local.results) == len(PLACES)


def write_files(folder: Path) -> Path:
    folder.mkdir()
    for i in range(40):
        text = (
            f"Document {i} is about topic{i % 7}: the animal{i} lives in Place{i}. "
            f"It calls parse_item_{i} and crosses the river Nile{i % 3}.\n\n"
            + "More words here. "
            * (i % 5)
            * 20
        )
        (folder / f"d{i}.md").write_text(text, encoding="utf-8")
    (folder / "empty.md").write_text("", encoding="utf-8")
    return folder


@pytest.mark.slow
def test_index_on_ray_searches_as_the_local_index(cluster: Any, tmp_path: Path, capsys: Any) -> None:
    from selfrag_core.presets import open_index

    docs = write_files(tmp_path / "docs")
    common = ["index", str(docs), "--embedder", "hashing", "--chunk-size", "300", "--plain"]
    assert main([*common, "--index", str(tmp_path / "local")]) == 0
    local_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert main([*common, "--index", str(tmp_path / "ray"), "--ray", "--ray-workers", "2"]) == 0
    ray_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert ray_line.replace(str(tmp_path / "ray"), "X") == local_line.replace(str(tmp_path / "local"), "X")
    local = open_index(tmp_path / "local", create=False)
    ray = open_index(tmp_path / "ray", create=False)
    assert ray.count() == local.count() > 40 and ray.sources() == local.sources()
    for query in ("animal7 Place7", "topic3 river", "parse_item_12", "Nile2 animal", "more words"):
        found = [[(d.id, round(d.score, 6), d.text) for d in rag.retrieve(query, 8)] for rag in (local, ray)]
        assert found[0] == found[1], query
    # again: every file unchanged, nothing embedded or added twice
    assert main([*common, "--index", str(tmp_path / "ray"), "--ray"]) == 0
    assert ", 0 new chunk(s)" in capsys.readouterr().out
    assert open_index(tmp_path / "ray", create=False).count() == local.count()
