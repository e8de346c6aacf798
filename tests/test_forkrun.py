"""tests/forkrun.py, the example tests' runner: a run forked from its server gives what
`subprocess.run([sys.executable, ...], capture_output=True, text=True)` gives (the
reference, run beside it): exit status, output, working directory, environment, argv,
sys.path[0], __main__, atexit handlers, threads joined, tracebacks; a timeout raises
TimeoutExpired and kills what the run started; an environment read at load falls back."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

import forkrun

SCRIPT = textwrap.dedent("""\
    import atexit, os, sys, threading, time
    import numpy as np
    print("argv", sys.argv[1:], "cwd", os.getcwd(), "path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
    import tempfile
    print("name", __name__, "env", os.environ.get("FORKRUN_PROBE"), "stdin", repr(sys.stdin.read()))
    print("tempdir", tempfile.gettempdir())
    print("main", sys.modules["__main__"].__file__ == __file__, "numpy drawn", 0 <= np.random.rand() < 1)
    print("to stderr", file=sys.stderr)
    atexit.register(lambda: print("atexit ran"))
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread joined"))).start()
    if sys.argv[1:] == ["fail"]:
        raise ValueError("on purpose")
    sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
""")


def both(args, **kw):
    env = dict(os.environ, FORKRUN_PROBE="seen", TMPDIR=str(kw["cwd"]))  # (the run's own: not the server's)
    ref = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, **kw)
    got = forkrun.run(args, env=env, **kw)
    return ref, got


@pytest.mark.parametrize("extra", [[], ["3"], ["fail"], ["a b", "é"]])
def test_a_script_runs_as_python_runs_it(tmp_path, extra):
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    ref, got = both([str(script), *extra], cwd=tmp_path)
    assert got.returncode == ref.returncode and got.stdout == ref.stdout and got.args == ref.args, (ref, got)
    assert got.stderr == ref.stderr, (ref.stderr, got.stderr)
    assert "atexit ran" in got.stdout and "thread joined" in got.stdout and f"tempdir {tmp_path}" in got.stdout
    if extra == ["fail"]:
        assert got.returncode == 1 and "ValueError: on purpose" in got.stderr and "forkrun" not in got.stderr


def test_dash_m_and_dash_c(tmp_path):
    ref, got = both(["-m", "json.tool", "--help"], cwd=tmp_path)
    assert (got.returncode, got.stdout) == (ref.returncode, ref.stdout) and "usage" in got.stdout
    code = "import sys, os; print(sys.argv, repr(sys.path[0]), __name__, os.getcwd()); raise SystemExit('bye')"
    ref, got = both(["-c", code, "x"], cwd=tmp_path)
    assert (got.returncode, got.stdout, got.stderr) == (ref.returncode, ref.stdout, ref.stderr) == (1, got.stdout, "bye\n")


def test_a_timeout_kills_the_run_and_what_it_started(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)")
    t = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as e:
        forkrun.run(["-c", code], timeout=3)
    assert time.monotonic() - t < 30 and "started" in e.value.output
    grandchild = int(pidfile.read_text())
    for _ in range(100):  # (killed with its group; reaped by init soon after)
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"process {grandchild} outlived the timeout")


def test_an_environment_read_at_load_runs_a_plain_process(monkeypatch):
    """OMP_NUM_THREADS differs from the server's: the run is a process of its own (its
    parent is this one, not the server), which reads it as it starts."""
    code = "import os, torch; print(os.getppid(), torch.get_num_threads())"
    threads = "1" if os.environ.get("OMP_NUM_THREADS") != "1" else "2"
    mine = forkrun.run(["-c", code], env=dict(os.environ, OMP_NUM_THREADS=threads))
    assert mine.stdout.split() == [str(os.getpid()), threads], mine
    served = forkrun.run(["-c", code])
    assert served.returncode == 0 and served.stdout.split()[0] != str(os.getpid()), served
    monkeypatch.setenv("GPUDECODE_TEST_FORK", "0")
    assert forkrun.run(["-c", code]).stdout.split()[0] == str(os.getpid())
