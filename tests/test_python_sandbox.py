"""Claims about esopt.agent.tools.python_sandbox: model-written code runs, and cannot hurt the host.

Tests marked "OS layer" turn the audit hook off (audit_hook=False) to show that the
namespaces, the uid drop and the rlimits hold on their own, as they must against native
code; they are skipped where the layer is unavailable (PythonSandbox.layers).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import psutil
import pytest
from esopt.agent.tools import Tool
from esopt.agent.tools.python_sandbox import PythonSandbox

ROOT = Path(__file__).resolve().parents[1]
LAYERS = PythonSandbox().layers


def needs(layer: str):
    return pytest.mark.skipif(not LAYERS[layer], reason=f"the {layer} layer is unavailable here")


def assert_no_process_left(uid: int | None = None) -> None:
    """No live descendant of this test process, and none of the call's uid (the sandbox's own)."""
    assert psutil.Process().children(recursive=True) == []
    if uid is not None and uid != os.getuid():
        live = [p.pid for p in psutil.process_iter(["uids", "status"])
                if p.info["uids"] and uid in p.info["uids"] and p.info["status"] != psutil.STATUS_ZOMBIE]
        assert live == []


def first_line_uid(stdout: str) -> int | None:
    line = stdout.split("\n", 1)[0]
    return int(line) if line.isdigit() else None


def test_it_is_a_tool_with_a_one_line_description():
    box: Tool = PythonSandbox()  # the Protocol is not runtime_checkable: check its members
    assert box.name == "python" and isinstance(box("print(1)", None), str)
    assert "\n" not in box.description and "print()" in box.description


def test_prints_the_result_of_a_computation():
    box = PythonSandbox()
    assert box("print(347 * 29 + 18)") == "10081"
    r = box.run("import math\nprint(math.comb(10, 3))")
    assert (r.status, r.stdout, r.returncode, r.truncated) == ("ok", "120\n", 0, False)
    assert box("x = 2") == "(no output: print() the values you want to see)"


def test_syntax_error_comes_back_as_an_observation():
    box = PythonSandbox()
    obs = box("print('unclosed'")
    assert box.run("print('unclosed'").status == "error"
    assert "SyntaxError" in obs and "never closed" in obs
    assert "Traceback" not in obs or "<code>" in obs  # no bootstrap internals


def test_an_exception_shows_the_traceback_tail_with_the_failing_line():
    obs = PythonSandbox()("print('before')\ndef f(x):\n    return 1 / x\nf(0)")
    assert obs.startswith("before\n")
    assert 'File "<code>", line 3, in f' in obs and "return 1 / x" in obs
    assert obs.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "json.loads" not in obs and "bootstrap" not in obs.lower()


def test_infinite_loop_is_killed_at_the_wall_clock_timeout():
    box = PythonSandbox(timeout_s=1, cpu_s=30)
    t = time.monotonic()
    r = box.run("import time\nprint('started')\nwhile True: time.sleep(0.01)")
    assert time.monotonic() - t < 3
    assert r.status == "timeout" and r.stdout == "started\n"  # output before the timeout survives
    assert box.observation(r) == "started\nTimed out after 1 s (wall clock); the process was killed."
    assert_no_process_left()


def test_cpu_bound_loop_is_stopped_by_the_cpu_limit():
    box = PythonSandbox(timeout_s=20, cpu_s=1)
    t = time.monotonic()
    r = box.run("while True: pass")
    assert time.monotonic() - t < 4
    assert r.status == "timeout"
    assert "1 s of CPU time (the CPU limit)" in box.observation(r)


@pytest.mark.parametrize("code", [
    "import os\nprint(os.getuid(), flush=True)\nwhile True: os.fork()",
    ("import os, sys, subprocess\nprint(os.getuid(), flush=True)\n"
     "while True: subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])"),
    ("import os, multiprocessing as mp, time\nprint(os.getuid(), flush=True)\n"
     "mp.set_start_method('spawn')\nwhile True: mp.Process(target=time.sleep, args=(60,)).start()"),
    "import os\nprint(os.getuid(), flush=True)\nos.system('sleep 60 &')",
], ids=["fork", "subprocess", "multiprocessing", "system"])
def test_fork_bomb_is_contained_and_leaves_no_processes(code):
    box = PythonSandbox(timeout_s=2)
    r = box.run(code)
    obs = box.observation(r)
    assert r.status == "refused", obs
    assert "SandboxViolation" in obs and "starting processes is not allowed in this sandbox" in obs
    assert_no_process_left(first_line_uid(r.stdout))


@needs("unprivileged_uid")
def test_os_layer_fork_bomb_without_the_audit_hook_is_capped_and_killed():
    box = PythonSandbox(timeout_s=1, audit_hook=False, max_processes=16)
    t = time.monotonic()
    r = box.run("import os\nprint(os.getuid(), flush=True)\n"
                "while True:\n    try: os.fork()\n    except OSError: pass")
    assert time.monotonic() - t < 4
    assert r.status == "timeout" and "Timed out after 1 s" in box.observation(r)
    assert_no_process_left(first_line_uid(r.stdout))


@needs("unprivileged_uid")
def test_os_layer_rlimit_nproc_caps_processes_for_native_code():
    box = PythonSandbox(audit_hook=False, max_processes=8)
    r = box.run("import os, time\nprint(os.getuid(), flush=True)\nn = 0\n"
                "for i in range(50):\n"
                "    try: pid = os.fork()\n"
                "    except OSError as e: print('fork failed:', e); break\n"
                "    if pid == 0: time.sleep(60); os._exit(0)\n"
                "    n += 1\n"
                "print('forked', n)")
    obs = box.observation(r)
    assert "fork failed: [Errno 11] Resource temporarily unavailable" in obs
    assert int(obs.rsplit("forked ", 1)[1].split()[0]) < 8
    assert_no_process_left(first_line_uid(r.stdout))  # the sleeping children were killed


@needs("unprivileged_uid")
def test_os_layer_a_process_that_leaves_the_group_with_setsid_is_killed_too():
    box = PythonSandbox(timeout_s=5, audit_hook=False)
    t = time.monotonic()
    r = box.run("import os, time\nprint(os.getuid(), flush=True)\n"
                "if os.fork() == 0:\n    os.setsid()\n"
                "    if os.fork() == 0: time.sleep(60)\n    os._exit(0)\n"
                "print('parent done')")
    assert time.monotonic() - t < 3  # the grandchild holds the pipes, yet the call returns
    assert r.status == "ok" and "parent done" in box.observation(r)
    assert_no_process_left(first_line_uid(r.stdout))


def test_ten_gigabyte_allocation_fails_with_a_memory_error():
    box = PythonSandbox()
    r = box.run("x = bytearray(10 * 2**30)")
    obs = box.observation(r)
    assert r.status == "memory", obs
    assert "MemoryError" in obs and "512 MiB" in obs


def test_writing_outside_the_temp_dir_is_refused(tmp_path):
    targets = [Path(f"/tmp/esopt_escape_{uuid.uuid4().hex}"), ROOT / f"esopt_escape_{uuid.uuid4().hex}",
               tmp_path / "escape.txt"]
    code = ("import os\n"
            f"for p in {[str(t) for t in targets]!r}:\n"
            "    try: open(p, 'w').write('x'); print('WROTE', p)\n"
            "    except OSError as e: print('refused:', e)\n"
            f"os.symlink({str(targets[0])!r}, 'link')\n"
            "try: open('link', 'w').write('x'); print('WROTE through link')\n"
            "except OSError as e: print('refused:', e)\n"
            f"try: os.rename('link', {str(targets[1])!r}); print('RENAMED')\n"
            "except OSError as e: print('refused:', e)\n"
            "open('inside.txt', 'w').write('fine')\n"
            "print('inside:', open('inside.txt').read())")
    obs = PythonSandbox()(code)
    assert "WROTE" not in obs and "RENAMED" not in obs
    assert obs.count("only the working directory is writable") == 5
    assert "inside: fine" in obs
    for t in targets:
        assert not t.exists()


@needs("read_only_filesystem")
def test_os_layer_filesystem_is_read_only_outside_the_temp_dir_without_the_audit_hook():
    targets = [Path(f"/tmp/esopt_escape_{uuid.uuid4().hex}"), ROOT / f"esopt_escape_{uuid.uuid4().hex}",
               Path(f"/dev/shm/esopt_escape_{uuid.uuid4().hex}")]
    code = (f"for p in {[str(t) for t in targets]!r}:\n"
            "    try: open(p, 'w').write('x'); print('WROTE', p)\n"
            "    except OSError as e: print('refused:', e.strerror)\n"
            "open('inside.txt', 'w').write('fine')\nprint('inside:', open('inside.txt').read())")
    obs = PythonSandbox(audit_hook=False)(code)
    assert "WROTE" not in obs and obs.count("refused: Read-only file system") == 3
    assert "inside: fine" in obs
    for t in targets:
        assert not t.exists()


@pytest.fixture
def listener():
    srv = socket.create_server(("127.0.0.1", 0))
    srv.setblocking(False)
    yield srv
    srv.close()


def assert_nobody_connected(srv: socket.socket) -> None:
    time.sleep(0.1)
    with pytest.raises(BlockingIOError):
        srv.accept()


def test_opening_a_socket_is_refused(listener):
    port = listener.getsockname()[1]
    box = PythonSandbox()
    r = box.run(f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))\nprint('CONNECTED')")
    obs = box.observation(r)
    assert r.status == "refused" and "CONNECTED" not in obs
    assert "network access is not allowed in this sandbox" in obs
    assert "network access" in box(f"import socket\nsocket.create_connection(('127.0.0.1', {port}))")
    assert "network access" in box("import urllib.request\nurllib.request.urlopen('http://example.com')")
    assert_nobody_connected(listener)


@needs("network_namespace")
def test_os_layer_network_is_unreachable_without_the_audit_hook(listener):
    port = listener.getsockname()[1]
    obs = PythonSandbox(audit_hook=False)(
        f"import socket\ns = socket.socket()\ns.settimeout(2)\n"
        f"try: s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
        "except OSError as e: print('no network:', e)")
    assert "CONNECTED" not in obs and "no network:" in obs
    assert_nobody_connected(listener)


def test_loading_native_code_through_ctypes_is_refused():
    box = PythonSandbox()
    obs = box("import ctypes\nprint('imported')\nlibc = ctypes.CDLL('libc.so.6')\nlibc.system(b'id')")
    assert obs.startswith("imported") and "ctypes.dlopen: native code (ctypes) is not allowed" in obs
    assert "not allowed" in box("import ctypes\nctypes.CDLL(None).system(b'id')")


def test_output_is_truncated():
    box = PythonSandbox(max_output_chars=300)
    r = box.run("print('x' * 100_000)")
    obs = box.observation(r)
    assert r.status == "ok" and r.truncated and len(obs) <= 300
    assert obs.startswith("xxx") and obs.endswith("[... output truncated]")


def test_an_endless_output_flood_neither_hangs_nor_floods_the_parent():
    box = PythonSandbox(timeout_s=1)
    t = time.monotonic()
    r = box.run("while True: print('y' * 1000)")
    assert time.monotonic() - t < 3
    assert r.status == "timeout" and r.truncated and len(r.stdout) <= box.capture_bytes
    obs = box.observation(r)
    assert len(obs) <= box.max_output_chars and "[... output truncated]" in obs and "Timed out" in obs


def test_a_child_that_closes_its_pipes_and_lingers_is_still_stopped():
    box = PythonSandbox(timeout_s=1)
    t = time.monotonic()
    r = box.run("import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)")
    assert time.monotonic() - t < 3
    assert r.status == "timeout" and "Timed out after 1 s" in box.observation(r)
    assert_no_process_left()


def test_temp_dir_is_removed_afterwards():
    box = PythonSandbox()
    r = box.run("import os\nopen('data.txt', 'w').write('x' * 1000)\nos.mkdir('sub')\nprint(os.getcwd())")
    cwd = Path(r.stdout.strip())
    assert r.status == "ok" and cwd.name == "work" and cwd.parent.name.startswith("esopt-sandbox-")
    assert not cwd.exists() and not cwd.parent.exists()
    # and the next call starts from an empty directory
    assert box("import os\nprint(os.listdir('.'))") == "[]"


def test_environment_does_not_leak(monkeypatch):
    monkeypatch.setenv("ESOPT_TEST_SECRET", "hunter2")
    obs = PythonSandbox()("import os\nprint(sorted(os.environ))\nprint(os.environ.get('ESOPT_TEST_SECRET'))")
    assert "ESOPT_TEST_SECRET" not in obs and "hunter2" not in obs
    assert obs.endswith("None") and "'HOME'" in obs


def test_numpy_and_sympy_are_importable_when_installed():
    pytest.importorskip("numpy")
    pytest.importorskip("sympy")
    obs = PythonSandbox(timeout_s=20)(
        "import numpy as np, sympy as sp\nx = sp.Symbol('x')\n"
        "print(sp.integrate(x**2, (x, 0, 3)), int(np.arange(5).sum()))")
    assert obs == "9 10"


def test_bad_input_never_raises():
    box = PythonSandbox()
    for code in ["", "\x00", "print('\udc80')", "exit(3)", "raise SystemExit('bye')", "import sys; sys.exit(0)"]:
        assert isinstance(box(code), str)
    assert box("raise SystemExit('bye')") == "bye"
    assert box.run("exit(3)").returncode == 3


def test_rlimits_and_the_audit_hook_are_always_active():
    assert LAYERS["rlimits"] and LAYERS["audit_hook"]
    if os.geteuid() == 0:
        print("layers as root:", LAYERS)
