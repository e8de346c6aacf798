"""Python scripts run by the tests in processes forked from one that imported torch once.

The example tests start `python examples/.../train.py ...` about fifty times in a run, and
each such process spent most of its time importing torch and torchvision (torchvision.ops
imports torch._dynamo) and tearing the interpreter down (bench/RESULTS.md, "forty-fifth
session", has the times). `run()` keeps,
for each test process, a server process that imported torch and torchvision (started on
first use), and forks a child of it for each run. The child runs the command as a fresh
interpreter would:

- it takes the run's working directory and environment (os.environ replaced, tempfile's
  folder chosen again from its TMPDIR);
- stdin is /dev/null, stdout and stderr go to files that the caller reads;
- it is the leader of its own process group: a timeout kills it and what it started;
- `script args` runs the script as __main__ (runpy, sys.path[0] its folder), `-m mod args`
  the module (sys.path[0] the working directory), `-c code args` the code;
- it ends as python does up to the interpreter's teardown: its non-daemon threads joined,
  its atexit handlers run, its output flushed, the status SystemExit's code gives (1 and
  the traceback for an exception); the teardown that follows (every module's objects
  freed, seconds with torch loaded) is skipped;
- numpy's global generator is seeded anew (Python's `random` reseeds itself at a fork).

What a fork cannot give falls back to a plain `subprocess.run`:
- an environment that differs from the test process's in a variable read when a library
  loads: OMP_*, MKL_*, KMP_*, CUDA_*, NUMBA_*, TORCH*, PYTORCH_*, LD_*, PYTHON*,
  NVIDIA_*;
- a command that is neither a script, nor -m, nor -c;
- GPUDECODE_TEST_FORK=0 in the environment, which runs every one as a plain subprocess.

What differs from a plain process: torch and torchvision are imported before the script's
first line (a script that sets one of the variables above before importing torch would see
a difference; none of ours does), and the runs of one test process share Python's string
hash seed.
"""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile

__all__ = ["run"]

_READ_AT_LOAD = ("OMP_", "MKL_", "KMP_", "CUDA_", "NUMBA_", "TORCH", "PYTORCH_", "LD_", "PYTHON", "NVIDIA_")
_servers: dict[tuple, subprocess.Popen] = {}  # (one: this process's environment's, while it keeps it)


def _load_time_env(env) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(_READ_AT_LOAD)))


def _server(key: tuple) -> subprocess.Popen | None:
    """The server of this process's environment, started on first use; None for a run whose
    variables read at load differ from it (a server for it would cost a run's imports again)."""
    if key != _load_time_env(os.environ):
        return None
    srv = _servers.get(key)
    if srv is not None and srv.poll() is None:
        return srv
    log = tempfile.TemporaryFile()
    srv = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=log, env=dict(os.environ), text=True)
    srv.log = log  # type: ignore[attr-defined]
    ready = srv.stdout.readline()  # type: ignore[union-attr]
    if ready.strip() != "ready":
        log.seek(0)
        raise RuntimeError(f"the fork server did not start: {ready!r} {log.read()[-3000:]!r}")
    _servers[key] = srv
    return srv


@atexit.register
def _close() -> None:
    for srv in _servers.values():
        if srv.poll() is None:
            srv.stdin.close()  # type: ignore[union-attr]  (it ends at the end of its input)
            try:
                srv.wait(timeout=10)
            except subprocess.TimeoutExpired:
                srv.kill()


def run(args: list, *, cwd=None, env=None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, *args], cwd=cwd, env=env, timeout=timeout,
    capture_output=True, text=True)`, in a child forked from a server that imported torch
    and torchvision where it can be (the module's docstring says where not)."""
    args = [str(a) for a in args]
    env = dict(os.environ if env is None else env)
    cmd = [sys.executable, *args]
    forkable = env.get("GPUDECODE_TEST_FORK", "1") != "0" and bool(args) and (
        args[0] in ("-m", "-c") and len(args) > 1 or not args[0].startswith("-"))
    srv = _server(_load_time_env(env)) if forkable else None
    if srv is None:
        return subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="forkrun-") as d:
        out, err = os.path.join(d, "out"), os.path.join(d, "err")
        req = {"args": args, "cwd": os.path.abspath(cwd or os.getcwd()), "env": env, "timeout": timeout,
               "out": out, "err": err}
        srv.stdin.write(json.dumps(req) + "\n")  # type: ignore[union-attr]
        srv.stdin.flush()  # type: ignore[union-attr]
        line = srv.stdout.readline()  # type: ignore[union-attr]
        if not line:
            srv.log.seek(0)  # type: ignore[attr-defined]
            raise RuntimeError(f"the fork server ended: {srv.log.read()[-3000:]!r}")  # type: ignore[attr-defined]
        reply = json.loads(line)
        stdout, stderr = _text(out), _text(err)
    if reply.get("timed_out"):
        raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)  # type: ignore[arg-type]
    return subprocess.CompletedProcess(cmd, reply["returncode"], stdout, stderr)


def _text(path: str) -> str:
    """What subprocess's text mode gives: decoded, universal newlines."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


# --------------------------------------------------------------------------- the server


def _child(req: dict) -> None:
    """In the forked child: become the run's process, run it, exit as python would."""
    os.setpgrp()
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    for name, target in (("out", 1), ("err", 2)):
        fd = os.open(req[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)  # (not the server's request pipe, whatever it had buffered)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    import tempfile

    tempfile.tempdir = None  # (the server's cached choice: the run's TMPDIR decides, as in a fresh process)
    import numpy as np

    np.random.seed()  # (a fresh interpreter seeds it from the OS; a fork would share the server's)
    import runpy

    args = req["args"]
    code: object = 0
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":
            import types

            sys.argv = ["-c", *args[2:]]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(args[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
    except BaseException as e:
        import traceback

        tb = e.__traceback__  # (from the run's own frames, as python prints it: not this module's, not runpy's)
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        code = 1
    os._exit(_finish(code))


def _finish(code: object) -> int:
    """What python does at its end up to its teardown: joins the non-daemon threads, runs
    the atexit handlers, flushes; the exit status SystemExit's code gives. (The teardown
    itself, the modules' objects freed one by one, takes seconds a run with torch loaded,
    and is skipped: os._exit follows.)"""
    import atexit
    import threading

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    threading._shutdown()  # type: ignore[attr-defined]  (what the interpreter calls first at its end)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return status


def _serve() -> None:
    import signal
    import time

    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torchvision  # noqa: F401

    print("ready", flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req)
        try:
            os.setpgid(pid, pid)  # (as the child does: a timeout's kill then finds its group whichever runs first)
        except OSError:
            pass
        deadline = None if req["timeout"] is None else time.monotonic() + req["timeout"]
        reply: dict = {}
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                reply["returncode"] = os.waitstatus_to_exitcode(status)
                break
            if deadline is not None and time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                reply["timed_out"] = True
                break
            time.sleep(0.02)
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    _serve()
