"""Claims about esopt.agent.tools.python_sandbox: model-written code runs, and cannot hurt the host.

Tests marked "OS layer" or "kernel" turn the audit hook off (audit_hook=False, as if the
code had bypassed it) to show that the kernel layers (seccomp, namespaces, mounts, the
uid drop, rlimits) hold on their own, as they must against native code; some also turn
seccomp off to show that the layers behind it hold too. They are skipped where a layer is
unavailable (PythonSandbox.layers).
"""

from __future__ import annotations

import logging
import os
import platform
import re
import socket
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from esopt.agent.tools import Tool, python_sandbox
from esopt.agent.tools.python_sandbox import LAYERS as LAYER_NAMES
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


@pytest.mark.skipif(not (LAYERS["unprivileged_uid"] or LAYERS["pid_namespace"]),
                    reason="neither a private uid nor a PID namespace here")
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
    targets = [Path(f"{d}/esopt_escape_{uuid.uuid4().hex}") for d in ("/tmp", ROOT, "/dev/shm", "/run", "/var/tmp")]
    code = (f"for p in {[str(t) for t in targets]!r}:\n"
            "    try: open(p, 'w').write('x'); print('WROTE', p)\n"
            "    except OSError as e: print('refused:', e.strerror)\n"
            "open('inside.txt', 'w').write('fine')\nprint('inside:', open('inside.txt').read())")
    obs = PythonSandbox(audit_hook=False)(code)
    reasons = [line.split(": ", 1)[1] for line in obs.splitlines() if line.startswith("refused:")]
    # a checkout under a hidden directory (/tmp) is not even there
    assert "WROTE" not in obs and len(reasons) == 5 and reasons[0] == "Read-only file system"
    assert set(reasons) <= {"Read-only file system", "No such file or directory"}
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
    obs = PythonSandbox(audit_hook=False, seccomp=False)(
        f"import socket\ns = socket.socket()\ns.settimeout(2)\n"
        f"try: s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
        "except OSError as e: print('no network:', e)")
    assert "CONNECTED" not in obs and "no network:" in obs
    assert_nobody_connected(listener)


# -- the kernel as the boundary: every attack class with the audit hook off ------------------

# Native-level helpers for the attack code: raw system calls by name (libseccomp resolves the
# numbers of this architecture), so no libc wrapper or audit event stands in between.
NATIVE = r'''
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
_scmp = ctypes.CDLL("libseccomp.so.2")
_scmp.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
buf = ctypes.create_string_buffer(4096)
BUF = ctypes.addressof(buf)

def nr(name):
    return _scmp.seccomp_syscall_resolve_name(name.encode())

def call(label, name, *args):
    """Print `label: ok` or `label: ERRNO` for the raw system call."""
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(nr(name)), *[ctypes.c_long(a) for a in args])
    if ret == 0 and name in ("clone", "clone3") and os.getpid() != PID:
        os._exit(0)  # a child that should not exist
    print(f"{label}: {'ok' if ret >= 0 else errno.errorcode[ctypes.get_errno()]}", flush=True)

PID = os.getpid()
'''

CLONE_FLAGS = {"NEWNS": 0x20000, "NEWCGROUP": 0x2000000, "NEWUTS": 0x4000000, "NEWIPC": 0x8000000,
               "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000}
FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17, "AF_RDS": 21,
            "AF_CAN": 29, "AF_TIPC": 30, "AF_BLUETOOTH": 31, "AF_ALG": 38, "AF_VSOCK": 40, "AF_XDP": 44}

# attack class -> code after NATIVE; every line it prints is `label: outcome`
ATTACKS = {
    "sockets of every family": "".join(
        f"call('socket {f} {t}', 'socket', {n}, {t}, 0)\n" for f, n in FAMILIES.items() for t in (1, 2, 3)
    ) + "call('socketpair AF_UNIX', 'socketpair', 1, 1, 0, BUF)\n",
    "namespaces": "".join(f"call('unshare {f}', 'unshare', {v})\n" for f, v in CLONE_FLAGS.items())
    + "".join(f"call('clone {f}', 'clone', {v} | 17, 0, 0, 0, 0)\n" for f, v in CLONE_FLAGS.items())
    + "call('clone3', 'clone3', BUF, 88)\n"
    + "fd = os.open('/proc/self/ns/net', os.O_RDONLY)\ncall('setns', 'setns', fd, 0)\n",
    "ptrace of the parent": "call('ptrace attach 1', 'ptrace', 16, 1, 0, 0)\n"
    "call('ptrace attach host parent', 'ptrace', 16, HOST_PID, 0, 0)\n"
    "call('ptrace traceme', 'ptrace', 0, 0, 0, 0)\n"
    "call('process_vm_readv 1', 'process_vm_readv', 1, BUF, 1, BUF, 1, 0)\n",
    "mounts": "call('mount tmpfs on /tmp', 'mount', BUF, BUF, BUF, 0, 0)\n"
    "ctypes.memmove(BUF, b'/tmp\\0', 5)\n"
    "call('umount /tmp', 'umount2', BUF, 2)\ncall('chroot /tmp', 'chroot', BUF)\n"
    "call('pivot_root', 'pivot_root', BUF, BUF)\ncall('fsopen', 'fsopen', BUF, 0)\n"
    "call('open_tree', 'open_tree', -100, BUF, 1)\ncall('move_mount', 'move_mount', -100, BUF, -100, BUF, 0)\n",
    "kernel attack surface": "call('io_uring_setup', 'io_uring_setup', 8, BUF)\ncall('bpf', 'bpf', 0, BUF, 72)\n"
    "call('keyctl', 'keyctl', 0, -1, 0)\ncall('add_key', 'add_key', BUF, BUF, 0, 0, -2)\n"
    "call('perf_event_open', 'perf_event_open', BUF, 0, -1, -1, 0)\n"
    "call('personality', 'personality', 0x40000)\ncall('userfaultfd', 'userfaultfd', 1)\n"
    "call('kexec_load', 'kexec_load', 0, 0, 0, 0)\ncall('init_module', 'init_module', BUF, 0, BUF)\n"
    "call('reboot', 'reboot', 0, 0, 0, 0)\n",
}


def outcomes(obs: str) -> dict[str, str]:
    return dict(line.rsplit(": ", 1) for line in obs.splitlines() if ": " in line)


@needs("seccomp")
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_kernel_layers_stop_every_attack_class_without_the_audit_hook(attack):
    code = NATIVE.replace("PID = ", f"HOST_PID = {os.getpid()}\nPID = ") + ATTACKS[attack]
    obs = PythonSandbox(audit_hook=False)(code)
    got = outcomes(obs)
    assert len(got) == ATTACKS[attack].count("call("), obs
    expect = {label: ("ENOSYS" if label == "clone3" else "EPERM") for label in got}
    assert got == expect
    assert_no_process_left()


@needs("seccomp")
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the 32-bit and x32 ABIs of x86_64")
@pytest.mark.parametrize("abi", ["int 0x80", "x32"])
def test_kernel_system_calls_of_another_abi_kill_the_process(abi):
    if abi == "x32":  # socket(AF_INET, SOCK_STREAM, 0) with the x32 bit
        attack = "fd = libc.syscall(ctypes.c_long(0x40000000 | 41), 2, 1, 0)\n"
    else:  # push rbx; mov eax, 359 (i386 socket); mov ebx, 2; mov ecx, 1; xor edx, edx; int 0x80; pop rbx; ret
        attack = ("import mmap\nmem = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
                  "mem.write(bytes([0x53, 0xb8, 0x67, 1, 0, 0, 0xbb, 2, 0, 0, 0, 0xb9, 1, 0, 0, 0, 0x31, 0xd2, "
                  "0xcd, 0x80, 0x5b, 0xc3]))\n"
                  "fd = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(mem)))()\n")
    box = PythonSandbox(audit_hook=False)
    r = box.run(NATIVE + "print('before', flush=True)\n" + attack + "print('SOCKET', fd)")
    assert r.stdout == "before\n" and r.status == "killed"
    assert "SIGSYS" in box.observation(r)


@pytest.fixture
def host_unix_sockets():
    """A world-writable AF_UNIX socket in the host's /tmp and an abstract one, both listening."""
    path = os.path.join("/tmp", f"esopt-test-{uuid.uuid4().hex[:12]}.sock")
    on_disk, abstract = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    on_disk.bind(path)
    os.chmod(path, 0o777)
    abstract.bind(f"\0esopt-test-{uuid.uuid4().hex[:12]}")
    for s in (on_disk, abstract):
        s.listen()
        s.setblocking(False)
    yield {"path": path, "abstract": abstract.getsockname()}, (on_disk, abstract)
    on_disk.close()
    abstract.close()
    os.unlink(path)


CONNECT = ("import socket\nfor label, address in ADDRESSES:\n"
           "    try:\n        s = socket.socket(socket.AF_UNIX)\n        s.connect(address)\n"
           "        print(label + ': CONNECTED')\n"
           "    except OSError as e:\n"
           "        print(label + ': ' + (errno.errorcode[e.errno] if e.errno else type(e).__name__))\n")


@needs("seccomp")
def test_kernel_the_hosts_unix_sockets_cannot_be_reached_without_the_audit_hook(host_unix_sockets):
    addresses, listeners = host_unix_sockets
    code = f"import errno\nADDRESSES = {sorted(addresses.items())!r}\n" + CONNECT
    assert outcomes(PythonSandbox(audit_hook=False)(code)) == {"abstract": "EPERM", "path": "EPERM"}  # seccomp
    for s in listeners:
        assert_nobody_connected(s)


@needs("hidden_host_dirs")
@needs("network_namespace")
def test_kernel_without_seccomp_too_the_hidden_tmp_and_the_netns_keep_the_sockets_away(host_unix_sockets):
    addresses, listeners = host_unix_sockets
    code = f"import errno\nADDRESSES = {sorted(addresses.items())!r}\n" + CONNECT
    got = outcomes(PythonSandbox(audit_hook=False, seccomp=False)(code))
    # the file is under a /tmp the sandbox sees empty; abstract names belong to the network namespace
    assert got == {"path": "ENOENT", "abstract": "ECONNREFUSED"}
    for s in listeners:
        assert_nobody_connected(s)


@needs("pid_namespace")
def test_kernel_the_pid_namespace_shows_no_parent_and_ptrace_cannot_reach_it():
    code = (NATIVE + f"HOST_PID = {os.getpid()}\n"
            "print('ppid:', os.getppid())\nprint('pids:', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
            "print('host parent visible:', os.path.exists(f'/proc/{HOST_PID}'))\n"
            "call('ptrace attach host parent', 'ptrace', 16, HOST_PID, 0, 0)\n"
            "call('ptrace attach 1', 'ptrace', 16, 1, 0, 0)\n"
            "call('kill host parent', 'kill', HOST_PID, 0)\n")
    for seccomp in (True, False):
        got = outcomes(PythonSandbox(audit_hook=False, seccomp=seccomp)(code))
        assert got["ppid"] == "1" and got["pids"] == "[1, 2]" and got["host parent visible"] == "False"
        assert got["kill host parent"] == "ESRCH"  # not in the namespace
        if seccomp:
            assert got["ptrace attach host parent"] == got["ptrace attach 1"] == "EPERM"
        elif os.geteuid() == 0:  # pid 1 is root's, the code runs as its own uid
            assert (got["ptrace attach host parent"], got["ptrace attach 1"]) == ("ESRCH", "EPERM")


@needs("hidden_host_dirs")
def test_kernel_the_hosts_shared_directories_look_empty(tmp_path):
    """/tmp, /var/tmp, /run and /dev/shm look empty but for the way to the working directory
    and to the interpreter's library directories, which the sandbox puts back by design (a
    checkout under /tmp with its virtualenv inside, as a fresh clone has it). Of such a
    checkout the code sees only the directories on the way, each listing just the next one,
    and the read-only site-packages it imports from: no source, result or .git, nothing
    else of the host's /tmp. So the listings are checked against those paths, wherever the
    checkout and its environment live."""
    marker = Path(tempfile.gettempdir()) / f"esopt-visible-{uuid.uuid4().hex[:12]}"
    shm = Path("/dev/shm") / marker.name
    marker.write_text("x")
    shm.write_text("x")
    box = PythonSandbox(audit_hook=False)
    libs = [os.path.realpath(p) for p in (os.path.dirname(os.__file__), *box.site_packages)]
    hidden = ("/tmp", "/var/tmp", "/run", "/dev/shm")
    # every directory strictly between a hidden one and a library directory
    between = sorted({lib.rsplit("/", k)[0] for lib in libs for d in hidden if lib.startswith(d + "/")
                      for k in range(1, lib[len(d):].count("/"))})
    try:
        r = box.run(
            f"import os\nfor d in {hidden + tuple(between)!r}:\n    print(d, sorted(os.listdir(d)))\n"
            f"print('marker', os.path.exists({str(marker)!r}), os.path.exists({str(shm)!r}))\nprint(os.getcwd())")
    finally:
        marker.unlink()
        shm.unlink()
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines()[:-1])
    cwd = r.stdout.splitlines()[-1]
    assert lines.pop("marker") == "False False"
    for d, listing in lines.items():  # only the next step on the way to the working or a library directory
        below = {p[len(d) + 1:].split("/")[0] for p in (cwd, *libs) if p.startswith(d + "/")}
        assert listing == repr(sorted(below)), d


@needs("hidden_host_dirs")
def test_a_library_directory_under_a_hidden_directory_is_put_back(tmp_path):
    lib = tmp_path / "lib"  # under pytest's 0700 /tmp/pytest-of-USER
    lib.mkdir()
    (lib / "esopt_hidden_lib.py").write_text("ANSWER = 42\n")
    lib.chmod(0o755)
    obs = PythonSandbox(site_packages=(str(lib),))("import esopt_hidden_lib\nprint(esopt_hidden_lib.ANSWER)")
    assert obs == "42"


# The bypass reported against the audit hook: a refused call's traceback leads to the hook's
# frame; its locals held the refusal function and the tables, and changing them turned it off.
NEUTER = r'''
frames = []
try:
    open("/etc/esopt-escape", "w")
except PermissionError as e:
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<sandbox>":
            frames.append(tb.tb_frame)
        tb = tb.tb_next
print("hook frames:", len(frames))
noop = (lambda *a, **k: None).__code__
for f in frames:
    for name, value in list(f.f_locals.items()):
        try:
            if hasattr(value, "clear"):
                value.clear()
                print("neutered:", name)
            elif type(value).__name__ == "function":
                value.__code__ = noop
                print("neutered:", name)
            elif type(value).__name__ == "mappingproxy":
                value[next(iter(value))] = None
                print("neutered:", name)
        except Exception as e:
            print("kept:", name, type(e).__name__)
'''


@needs("seccomp")
def test_the_reported_hook_bypass_no_longer_turns_the_hook_off_and_the_kernel_would_hold(host_unix_sockets):
    addresses, listeners = host_unix_sockets
    attack = (f"import errno\nADDRESSES = {sorted(addresses.items())!r}\n" + CONNECT
              + "try: open('/tmp/esopt-escape', 'w'); print('write: WROTE')\n"
              "except OSError as e: print('write:', type(e).__name__)\n"
              "import ctypes\n"
              "try: print('unshare:', ctypes.CDLL(None, use_errno=True).unshare(0x10000000) or 'ok')\n"
              "except OSError as e: print('unshare:', type(e).__name__)\n")
    obs = PythonSandbox()(NEUTER + attack)
    assert re.search(r"hook frames: [1-9]", obs) and "neutered:" not in obs and "kept: reasons" in obs, obs
    got = outcomes(obs)
    assert got["write"] == got["unshare"] == "SandboxViolation"  # the hook still refuses
    assert "SandboxViolation" in obs and "CONNECTED" not in obs
    # and a hook turned off completely (audit_hook=False) leaves the kernel layers: see the
    # tests above; the same attack, without it:
    got = outcomes(PythonSandbox(audit_hook=False)(attack))
    assert got == {"path": "EPERM", "abstract": "EPERM", "write": "OSError", "unshare": "-1"}
    for s in listeners:
        assert_nobody_connected(s)


@needs("hidden_host_dirs")  # its semaphores need a writable /dev/shm
def test_multiprocessing_without_the_audit_hook_fails_cleanly():
    box = PythonSandbox(audit_hook=False, timeout_s=10)
    t = time.monotonic()
    r = box.run("import multiprocessing as mp\nwith mp.Pool(2) as p:\n    print(p.map(abs, [-1, 2]))")
    assert time.monotonic() - t < 5 and r.status == "error" and "OSError" in box.observation(r)
    assert_no_process_left()


# -- which layers are active: probed, logged, recorded, and requirable ------------------------

def test_the_probe_reports_every_layer():
    assert tuple(LAYERS) == LAYER_NAMES and all(isinstance(v, bool) for v in LAYERS.values())
    assert PythonSandbox(seccomp=False).layers["seccomp"] is False  # skipped, never faked
    off = PythonSandbox(isolate=False).layers
    assert [k for k, v in off.items() if v] == ["rlimits", "audit_hook"]


def test_require_all_layers_fails_loudly_naming_what_is_missing():
    with pytest.raises(RuntimeError, match=r"lacks layers here: (.*, )?seccomp \(all layers are required"):
        PythonSandbox(seccomp=False, require_all_layers=True)
    if all(LAYERS.values()):
        assert PythonSandbox(require_all_layers=True)("print(1)") == "1"


def test_the_active_layers_are_logged_once_and_recorded(caplog):
    python_sandbox._log_layers.cache_clear()
    box = PythonSandbox(seccomp=False)
    with caplog.at_level(logging.INFO, logger="esopt.python_sandbox"):
        box.log_layers()
        box.log_layers()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and warned[0].getMessage().endswith("unavailable here: " + ", ".join(box.missing_layers))
    assert box.provenance() == {"layers": box.layers, "missing": box.missing_layers, "require_all_layers": False}
    assert "seccomp" in box.missing_layers


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


def test_threads_and_atexit_handlers_finish_before_the_process_exits():
    obs = PythonSandbox()("import atexit, threading, time\n"
                          "atexit.register(print, 'atexit ran')\n"
                          "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()\n"
                          "print('main done')")
    assert obs == "main done\nthread done\natexit ran"


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
