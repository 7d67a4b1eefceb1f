"""The settings that shape the graph itself (shard count, executor), read once when the definitions load."""

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class GraphSettings:
    """How the graph itself is shaped, read once when the definitions load (never at import): the number of
    trajectory shards (partition keys "0".."n_shards-1" of the `shard` dimension) and the executor."""

    n_shards: int = 4
    executor: str = "in_process"  # in_process | multiprocess | docker (dagster-docker's step-per-container)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "GraphSettings":
        """CLAWGYM_SHARDS (default 4) and CLAWGYM_EXECUTOR (in_process (default) | multiprocess | docker)."""
        env = os.environ if env is None else env
        n = env.get("CLAWGYM_SHARDS", "") or str(cls.n_shards)
        try:
            n_shards = int(n)
        except ValueError:
            raise ValueError(f"CLAWGYM_SHARDS: {n!r} is not an integer") from None
        if n_shards < 1:
            raise ValueError(f"CLAWGYM_SHARDS: must be at least 1, got {n_shards}")
        executor = env.get("CLAWGYM_EXECUTOR", "") or cls.executor
        if executor not in ("in_process", "multiprocess", "docker"):
            raise ValueError(f"CLAWGYM_EXECUTOR: {executor!r} is not one of in_process, multiprocess, docker")
        return cls(n_shards=n_shards, executor=executor)
