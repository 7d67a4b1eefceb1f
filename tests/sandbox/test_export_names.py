"""Every name the agent's filesystem allows travels through the clean room: the export reads it and a room writes it.

A name of NAME_MAX bytes (255) once made the room's write fail (its temporary name, the file's name plus a suffix,
was over the limit): an OSError in our own machinery, so the rollout was stored as infra and GRPO's reward raised.
A workspace the agent made is the agent's outcome; it is graded, never excluded. Docker and bwrap."""

from __future__ import annotations

import pytest

from clawgym.tasks import File, Task, Verifier
from clawgym.verify.runtime import verify_after_agent

WS = "/root/.openclaw/workspace"

REWARD_SH = """#!/usr/bin/env bash
n=$(find . -type f -name 'y*' | wc -l)
[ -f keep.txt ] && [ "$n" -ge 2 ] && echo 1.0 || echo 0.0
"""

TASK = Task(task_id="ex_names", instruction="Make files with long names.",
            files=[File(path="keep.txt", content=b"k\n")],
            verifier=Verifier(kind="reward_dir", timeout_s=60,
                              reward_files=[File(path="reward.sh", content=REWARD_SH.encode(), mode=0o755)]))

LONG = "y" * 255
DEEP = "/".join(["d" * 200] * 12)  # 2,411 bytes of directories: past a 2K path, each component legal


@pytest.fixture(scope="module", params=["docker", "bwrap"])
def factory(request):
    return request.getfixturevalue(f"{request.param}_factory")


def test_the_longest_legal_names_round_trip_through_export_and_room(factory):
    sb = factory.open(TASK.files)
    r = sb.exec(["bash", "-c", f"cd {WS} && echo a > {LONG} && mkdir -p {DEEP} && echo b > {DEEP}/{LONG}"],
                timeout=60)
    assert r.ok, r.stderr
    export = sb.export_workspace()
    assert {LONG, f"{DEEP}/{LONG}", "keep.txt"} <= set(export.files)
    res = verify_after_agent(TASK, sb, factory.rooms(), export=export)  # raised OSError(ENAMETOOLONG) before
    assert res.score == 1.0, (res.score, res.errors)
