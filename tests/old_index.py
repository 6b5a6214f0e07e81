"""Indexes saved by earlier selfrag formats, kept as test data: their ``.npy`` arrays are
stored as JSON (``name.npy.json``: dtype, shape, values) so that no binary array is in git,
and written back, byte for byte, where a test copies the index."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np


def copy_old_index(source: Path, target: Path) -> Path:
    """``source`` copied to ``target`` with every ``x.npy.json`` turned back into ``x.npy``."""
    shutil.copytree(source, target)
    for stored in target.rglob("*.npy.json"):
        spec = json.loads(stored.read_text())
        values = np.asarray(spec["data"], dtype=np.dtype(spec["dtype"])).reshape(spec["shape"])
        np.save(stored.with_suffix(""), values, allow_pickle=False)
        stored.unlink()
    return target
