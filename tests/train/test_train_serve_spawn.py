"""ModelServer's child processes die with the process, not with the thread that started them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

from clawgym.sandbox.spawner import die_with_parent as _die_with_parent
from clawgym.sandbox.spawner import popen_die_with_parent


def _alive(p: subprocess.Popen, wait_s: float = 0.7) -> bool:
    time.sleep(wait_s)
    return p.poll() is None


def _start_in_thread(fn) -> subprocess.Popen:
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("p", fn()))
    t.start()
    t.join()  # the starting thread is gone now
    return box["p"]


def test_child_outlives_the_thread_that_started_it():
    p = _start_in_thread(lambda: popen_die_with_parent(["sleep", "30"]))
    try:
        assert _alive(p), "child was killed when its starting thread exited"
    finally:
        p.kill()
        p.wait()


def test_plain_pdeathsig_dies_with_its_thread():
    """The pitfall the spawner avoids (if this stops holding, the spawner is no longer needed)."""
    p = _start_in_thread(lambda: subprocess.Popen(["sleep", "30"], preexec_fn=_die_with_parent))
    try:
        assert not _alive(p)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_child_dies_when_the_process_is_killed(tmp_path):
    pidfile = tmp_path / "pid"
    code = textwrap.dedent(f"""
        import threading, time
        from clawgym.sandbox.spawner import popen_die_with_parent
        def go():
            p = popen_die_with_parent(["sleep", "60"])
            open({str(pidfile)!r}, "w").write(str(p.pid))
        t = threading.Thread(target=go); t.start(); t.join()
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        end = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < end:
            time.sleep(0.05)
        child = int(pidfile.read_text())
        os.kill(child, 0)  # alive while the parent lives
        parent.kill()
        parent.wait()
        end = time.monotonic() + 5
        while time.monotonic() < end:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            # a zombie re-parented to init also counts as gone
            try:
                with open(f"/proc/{child}/stat") as f:
                    if f.read().split(") ", 1)[1].startswith("Z"):
                        break
            except OSError:
                break
            time.sleep(0.05)
        else:
            os.kill(child, 9)
            raise AssertionError("child survived its parent process")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_busy_model_server_exits_when_its_parent_is_killed(tmp_path):
    """The embedded model server mid-generation (a long completion in flight) is gone within seconds of its parent
    being SIGKILLed — uvicorn's graceful SIGTERM shutdown would wait for the generation to finish."""
    from pathlib import Path

    from clawgym.train.base_model import prepare_base_model

    # the embedded SmolLM2 as an HF folder (idempotent), where the other tests and the demo keep it
    model = prepare_base_model(Path(__file__).resolve().parents[2] / "data" / "models" / "smollm2-135m-instruct")
    info = tmp_path / "server"
    code = textwrap.dedent(f"""
        import threading, time, httpx
        from clawgym.serve import ModelServer
        srv = ModelServer({str(model)!r}, startup_timeout_s=300)
        srv.start()
        body = {{"model": srv.model_name, "max_tokens": 4000, "temperature": 1.0,
                "messages": [{{"role": "user", "content": "Write a very long story."}}]}}
        threading.Thread(target=lambda: httpx.post(srv.base_url + "/chat/completions", json=body, timeout=600),
                         daemon=True).start()
        time.sleep(2)
        open({str(info)!r}, "w").write(str(srv.pid))
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        end = time.monotonic() + 300
        while not (info.exists() and info.read_text()) and time.monotonic() < end and parent.poll() is None:
            time.sleep(0.2)
        assert info.exists(), "the server did not start"
        server = int(info.read_text())
        os.kill(server, 0)  # generating
        parent.kill()
        parent.wait()
        end = time.monotonic() + 15
        gone = False
        while time.monotonic() < end and not gone:
            try:
                os.kill(server, 0)
                with open(f"/proc/{server}/stat") as f:
                    gone = f.read().split(") ", 1)[1].startswith("Z")
            except (ProcessLookupError, OSError):
                gone = True
            time.sleep(0.2)
        assert gone, "the model server outlived its killed parent by 15 s"
    finally:
        if parent.poll() is None:
            parent.kill()
        try:
            os.killpg(int(info.read_text()), 9) if info.exists() and info.read_text() else None
        except (ProcessLookupError, ValueError, PermissionError):
            pass
