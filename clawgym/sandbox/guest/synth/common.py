"""Shared by the in-sandbox drivers (stdlib only)."""

import shutil


class Discard:
    """Finished work directories, removed in batches: the sandbox's tmpfs goes away whole at close, far
    cheaper than file by file, so they are only removed before the written bytes pile up past `limit`."""

    def __init__(self, limit: int = 16 << 20):
        self.limit = limit
        self.dirs: list = []
        self.nbytes = 0

    def add(self, d: str, nbytes: int) -> None:
        self.dirs.append(d)
        self.nbytes += nbytes + 4096
        if self.nbytes > self.limit:
            for x in self.dirs:
                shutil.rmtree(x, ignore_errors=True)
            self.dirs, self.nbytes = [], 0
