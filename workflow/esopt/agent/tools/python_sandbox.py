"""`PythonSandbox`: the `python` tool, which runs model-written code in a throwaway process.

Model output is untrusted, so every call runs in a separate, short-lived interpreter
(`python -I -S -B`, no site processing: fast start) in a fresh temporary directory that
is deleted afterwards, with a minimal environment (no inherited variables, HOME and
TMPDIR point at the working directory). The parent reads the output through pipes with
a byte cap and a deadline, so floods, silence, closed pipes or processes that linger
cannot hang it; at the end it kills the whole process group (and, as root, every
process of the call's uid), so nothing of a call survives it.

Layers of defense, outermost first. `PythonSandbox.layers` says which are active here
(probed once per process; a layer that is unavailable is skipped, never faked):

- rlimits (always): CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS: a too-large
  allocation is a MemoryError), bytes per written file (RLIMIT_FSIZE), open files,
  processes/threads (RLIMIT_NPROC), no core dumps; plus the parent's wall-clock
  timeout, which SIGKILLs the process group.
- unprivileged_uid (root only): the child drops to a uid/gid of its own (one per
  call, from a high range no account uses: `uid_base`, default 2**30, and up) with no
  supplementary groups, so file
  permissions apply and RLIMIT_NPROC counts (it never applies to root). Since the uid
  is private to the call, the parent can kill every leftover process by uid, even
  ones that left the process group with setsid().
- no_new_privs (Linux): execve() of setuid binaries grants nothing.
- network_namespace: the child unshares a network namespace holding only a
  down loopback device, so there is no network even for native code. As root this
  is CLONE_NEWNET; otherwise an unprivileged user namespace is tried.
- read_only_filesystem (root only): a private mount namespace in which every mount is
  remounted read-only (MS_BIND remounts: per-mount flags, the host's mounts are not
  touched) and the working directory is a fresh tmpfs (size-capped, noexec, so code
  written there cannot be loaded as a native library). Directories on the way to the
  interpreter's libraries that the sandbox uid may not enter (pyenv under a 0700
  /root, say) are covered with a tmpfs that holds only bind mounts of the needed
  library directories; the rest of them stays hidden.
- audit_hook: a `sys.addaudithook` hook, installed by the bootstrap before the model's
  code runs, refuses (PermissionError subclass `SandboxViolation`): sockets and name
  lookups (`socket.*`), process creation (`os.fork`, `os.forkpty`, `os.system`,
  `os.exec`, `os.posix_spawn`, `subprocess.Popen`, `pty.spawn`; the undocumented
  `_posixsubprocess.fork_exec` is replaced by a stub), signals to other processes,
  `open` for writing and `os.remove/rename/mkdir/rmdir/chmod/chown/utime/truncate/
  link/symlink/setxattr/removexattr` outside the working directory (paths resolved
  with realpath), `os.open` of directories outside it, every `ctypes.*` event except
  the `dlopen(None)` that `import ctypes` (and so numpy) performs, raising rlimits,
  `gc.get_objects/get_referrers/get_referents` and `sys.settrace/setprofile` (which
  could reach the hook's state), `fcntl.ioctl`, `syslog.*`. Event names were checked
  against the Python 3.11 audit events table and the strings of this 3.11 build.

Limits, honestly: the audit hook is not a security boundary. It gives clear refusals
for ordinary code, but it can be bypassed (an `os.open` with `dir_fd` is reported
without the dir_fd; a reloaded `_posixsubprocess`; native code). The OS layers are the
boundary: with them a bypass still has no network, cannot write outside the tmpfs, runs
as an unprivileged uid with at most `max_processes` tasks and is killed with everything
it started. What they leave open: world-writable Unix sockets on the filesystem (a
network namespace does not cover them; read-only mounts do not stop connect()); the
sandbox can read world-readable files and see other processes in /proc (no PID
namespace). Without root there is no uid drop and no read-only mounts, so a bypass can
write wherever the parent's user can and a process that calls setsid() can outlive the
call; the network namespace then needs unprivileged user namespaces. Uids are picked
per call as `uid_base + 64 * (parent pid % 2**22) + (call counter % 64)`: unique
within one PID namespace unless one process runs more than 64 calls at once. The child
gets SIGKILL if the parent dies (PR_SET_PDEATHSIG), but a parent killed with SIGKILL
leaves its temporary directory behind.

Latency, measured here (2-core Linux VM, Python 3.11.7, parent as root, all six layers
active): `print(1)` takes a median of 27-29 ms per call over 20 calls (21 ms with
`isolate=False`; 21 ms for a non-root parent, whose user-namespace netns is cheap).
Importing numpy and sympy in the child adds about 0.4 s.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import selectors
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "error", "timeout", "memory", "refused", "killed"]

_SETUP_FAILED = 121  # exit status of the bootstrap when it cannot build the sandbox
_CODE_NAME = "<code>"  # the file name tracebacks show for the model's code

# Runs in the child before the model's code: as the parent's user, it builds the
# sandbox (namespaces, mounts, rlimits, uid drop), installs the audit hook, then runs
# the code read from a file. Passed on the command line (so it needs no readable file of
# its own) and compiled as "<sandbox>", so tracebacks can leave its frames out.
_BOOTSTRAP = r'''
import json, os, sys
cfg = json.loads(sys.argv[2])
with open(cfg["code"], encoding="utf-8", errors="surrogatepass") as f:
    SOURCE = f.read()  # read while still privileged: the code file is the parent's


class SandboxViolation(PermissionError):
    pass


def setup(cfg):
    """Build the OS layers; returns which are active. Runs before any untrusted code."""
    import ctypes, resource
    CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x20000, 0x10000000, 0x40000000
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
    MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
    KEEP = {"nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048,
            "relatime": 1 << 21, "strictatime": 1 << 24}
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

    def ok(ret):
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def mount(src, dst, fstype, flags, data=None):
        enc = lambda s: None if s is None else os.fsencode(s)
        ok(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)))

    def closed(path):
        """The first directory on the way to `path` that others may not enter (or, for
        `path` itself, list)."""
        cur = "/"
        for part in [p for p in path.split("/") if p]:
            cur = os.path.join(cur, part)
            need = 0o005 if cur == path else 0o001  # r-x for the directory itself, --x on the way
            if os.stat(cur).st_mode & need != need:
                return cur
        return None

    def open_up(dirs, stage):
        """Cover each closed directory on the way to `dirs` with a 0755 tmpfs holding
        bind mounts of only the children needed (shallowest first, repeat)."""
        for _ in range(8):
            need = {}
            for d in dirs:
                c = closed(d)
                if c == d:
                    return False  # a library directory itself is closed: cannot fix
                if c:
                    need.setdefault(c, set()).add(c + "/" + d[len(c) + 1:].split("/")[0])
            if not need:
                return True
            for parent, kids in need.items():
                saved = []
                for kid in sorted(kids):
                    s = os.path.join(stage, str(len(os.listdir(stage))))
                    os.mkdir(s)
                    mount(kid, s, None, MS_BIND | MS_REC)
                    saved.append((kid, s))
                mount("tmpfs", parent, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
                for kid, s in saved:
                    os.mkdir(kid)
                    mount(s, kid, None, MS_BIND | MS_REC)
                    ok(libc.umount2(os.fsencode(s), 2))  # MNT_DETACH
        return False

    def read_only_except(work):
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().splitlines()
        import codecs
        for line in lines:
            fields = line.split(b" ")
            target = codecs.escape_decode(fields[4])[0]
            if target == os.fsencode(work):
                continue
            opts = fields[5].decode().split(",")
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID  # MS_BIND: this mount only, not the host's superblock
            for o in opts:
                flags |= KEEP.get(o, 0)
            try:
                mount(None, target, None, flags)
            except OSError:
                if os.path.exists(target):  # gone or shadowed mounts do not matter
                    raise

    layers = dict(rlimits=False, audit_hook=False, no_new_privs=False, network_namespace=False,
                  read_only_filesystem=False, unprivileged_uid=False)
    root, uid, work, libs = os.geteuid() == 0, cfg["uid"], cfg["work"], cfg["libs"]
    if cfg["isolate"]:
        try:
            if root:
                ok(libc.unshare(CLONE_NEWNET))
            else:
                real_uid, real_gid = os.getuid(), os.getgid()
                ok(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET))
                for name, text in (("setgroups", "deny"), ("uid_map", f"{real_uid} {real_uid} 1"),
                                   ("gid_map", f"{real_gid} {real_gid} 1")):
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
            layers["network_namespace"] = True
        except OSError:
            pass
        if root and uid is not None:
            try:
                ok(libc.unshare(CLONE_NEWNS))
                mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing below may propagate to the host
                mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                      f"size={cfg['disk_mb']}m,mode=0700,uid={uid},gid={uid}")
                if open_up(libs, cfg["stage"]):
                    read_only_except(work)
                    layers["read_only_filesystem"] = True
            except OSError:
                pass  # the uid drop below checks what the libraries' paths look like now
    os.chdir(work)  # again: a tmpfs may now cover the directory the process started in
    limits = cfg["limits"]
    for name, value in limits.items():
        soft, hard = value if isinstance(value, list) else (value, value)
        resource.setrlimit(getattr(resource, name), (soft, hard))
    layers["rlimits"] = True
    if cfg["isolate"] and libc.prctl(38, 1, 0, 0, 0) == 0:  # PR_SET_NO_NEW_PRIVS
        layers["no_new_privs"] = True
    if root and uid is not None and (layers["read_only_filesystem"] or not any(closed(d) for d in libs)):
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            layers["unprivileged_uid"] = os.getuid() == uid
        except OSError:
            pass
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL if the parent dies (set after the uid change, which clears it)
    if os.getppid() != cfg["parent"]:
        os._exit(1)  # the parent died before that
    return layers


def install_hook(work):
    """The audit hook: clear refusals for ordinary code (not a boundary, see the module doc)."""
    import _posixsubprocess
    from os.path import join, realpath
    fsdecode, getpid, isdir, readlink = os.fsdecode, os.getpid, os.path.isdir, os.readlink
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    root = realpath(work)

    def refuse(what):
        raise SandboxViolation(f"{what} is not allowed in this sandbox")

    def fork_exec(*args, **kwargs):
        refuse("starting processes")
    _posixsubprocess.fork_exec = fork_exec  # called directly by multiprocessing, unaudited

    def inside(path, dir_fd=None):
        if isinstance(path, int):
            return True  # an open descriptor: checked when it was opened
        try:
            path = fsdecode(path)
            if dir_fd is not None and dir_fd >= 0:
                path = join(readlink(f"/proc/self/fd/{dir_fd}"), path)
            if path in ("/dev/null", "/dev/stdout", "/dev/stderr"):
                return True
            path = realpath(path)
        except Exception:
            return False
        return path == root or path.startswith(root + "/")

    reasons = dict.fromkeys(
        "socket.__new__ socket.bind socket.connect socket.getaddrinfo socket.gethostbyaddr "
        "socket.gethostbyname socket.gethostname socket.getnameinfo socket.getservbyname "
        "socket.getservbyport socket.sendmsg socket.sendto socket.sethostname urllib.Request "
        "syslog.openlog syslog.syslog".split(), "network access")
    reasons.update(dict.fromkeys(
        "os.fork os.forkpty os.system os.exec os.posix_spawn os.spawn subprocess.Popen "
        "pty.spawn webbrowser.open".split(), "starting processes"))
    reasons.update(dict.fromkeys(
        "ctypes.dlopen ctypes.dlsym ctypes.dlsym/handle ctypes.call_function ctypes.cdata "
        "ctypes.cdata/buffer ctypes.addressof ctypes.string_at ctypes.wstring_at "
        "ctypes.PyObj_FromPtr ctypes.get_errno ctypes.set_errno ctypes.create_string_buffer "
        "ctypes.create_unicode_buffer".split(), "native code (ctypes)"))
    reasons.update(dict.fromkeys(
        "gc.get_objects gc.get_referrers gc.get_referents sys.settrace sys.setprofile "
        "sys._current_frames resource.setrlimit resource.prlimit fcntl.ioctl".split(),
        "inspecting or changing the sandbox"))
    reasons.update(dict.fromkeys("os.kill os.killpg".split(), "signalling other processes"))
    # event -> ((path argument, dir_fd argument or None), ...) of paths that get written
    writes = {"os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),),
              "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.utime": ((0, 3),),
              "os.truncate": ((0, None),), "os.setxattr": ((0, None),),
              "os.removexattr": ((0, None),), "os.rename": ((0, 2), (1, 3)),
              "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),)}

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writing = bool(flags & WRITE) or (isinstance(mode, str) and any(c in mode for c in "wax+"))
            if writing and not inside(path):
                refuse(f"writing {fsdecode(path)!r} (only the working directory is writable)")
            if not writing and mode is None and not inside(path) and isdir(path):
                refuse(f"opening the directory {fsdecode(path)!r}")  # a dir_fd could escape the path check
            return
        if event in writes:
            for p, d in writes[event]:
                if not inside(args[p], None if d is None else args[d]):
                    refuse(f"{event} on {args[p]!r} (only the working directory is writable)")
            return
        reason = reasons.get(event)
        if reason is None:
            return
        if event == "ctypes.dlopen" and args[0] is None:
            return  # `import ctypes` (numpy does it) opens the main program; symbols stay refused
        if event == "os.kill" and args[0] in (0, getpid()):
            return
        refuse(f"{event}: {reason}")

    sys.addaudithook(hook)


def run(source):
    import builtins
    builtins.exit = builtins.quit = sys.exit  # -S leaves them out; models call exit()
    main = type(sys)("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [_CODE_NAME]
    try:
        exec(compile(source, _CODE_NAME, "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:
        import linecache, traceback
        linecache.cache[_CODE_NAME] = (len(source), None, source.splitlines(True), _CODE_NAME)
        tb = None if isinstance(e, SyntaxError) else e.__traceback__.tb_next  # skip this frame
        sys.stdout.flush()
        report = traceback.TracebackException(type(e), e, tb)
        report.stack = traceback.StackSummary.from_list(
            [f for f in report.stack if f.filename != "<sandbox>"])  # the audit hook's frames
        print("".join(report.format()), end="", file=sys.stderr)
        sys.exit(1)


_CODE_NAME, PROBE = cfg["code_name"], cfg["probe"]
try:
    sys.path.extend(cfg["site"])
    layers = setup(cfg)
    if cfg["hook"]:
        install_hook(cfg["work"])
        layers["audit_hook"] = True
    missing = [k for k, v in cfg["expect"].items() if v and not layers[k]]
    if missing:
        raise RuntimeError("layers missing: " + ", ".join(missing))
except BaseException as e:
    sys.stderr.write(f"sandbox setup failed: {type(e).__name__}: {e}\n")
    sys.exit(''' + str(_SETUP_FAILED) + r''')
del cfg, setup, install_hook
if PROBE:
    print(json.dumps(layers))
    sys.exit(0)
sys.stdout.reconfigure(line_buffering=True)  # partial output survives a timeout
run(SOURCE)
'''


@dataclass
class SandboxResult:
    status: Status  # ok | error (exception or exit status != 0) | timeout (wall or CPU) | memory | refused | killed
    stdout: str
    stderr: str
    returncode: int | None
    wall_s: float
    truncated: bool  # the process wrote more than was kept (see PythonSandbox.capture_bytes)
    message: str = ""  # one line on what happened, for non-"ok" results


_calls = itertools.count()


@dataclass
class PythonSandbox:
    """The `python` tool; see the module docstring for the layers and their limits."""

    timeout_s: float = 5.0  # wall clock, then SIGKILL to the process group
    cpu_s: int = 5  # RLIMIT_CPU (SIGXCPU; SIGKILL a second later)
    memory_mb: int = 512  # RLIMIT_AS
    max_output_chars: int = 2000  # of the observation
    max_file_bytes: int = 1 << 20  # RLIMIT_FSIZE
    max_processes: int = 16  # RLIMIT_NPROC (tasks: processes and threads; applies with the uid drop)
    max_open_files: int = 64  # RLIMIT_NOFILE
    disk_mb: int = 64  # size of the working directory's tmpfs (read_only_filesystem layer)
    capture_bytes: int = 1 << 16  # kept of stdout (head) and stderr (tail); the rest is read and dropped
    # Directories added to the child's sys.path (no site processing): by default the
    # parent's site-packages, so numpy/sympy import when installed.
    site_packages: tuple[str, ...] = field(default_factory=lambda: tuple(
        p for p in site.getsitepackages() if os.path.isdir(p)))
    isolate: bool = True  # namespaces and uid drop where possible; False: rlimits (+ hook) only
    audit_hook: bool = True  # False only to test that the OS layers hold on their own
    uid_base: int = 1 << 30
    python: str = sys.executable

    name = "python"

    @property
    def description(self) -> str:
        return (f"run Python 3 code in a fresh, isolated process (no network, {self.timeout_s:g} s limit); "
                "print() what you need to see")

    @property
    def layers(self) -> dict[str, bool]:
        """Which layers of defense are active here (probed once per configuration)."""
        return dict(_probe(self.python, self.site_packages, self.isolate, self.audit_hook, self.uid_base))

    def __call__(self, argument: str, task: Any = None) -> str:
        try:
            return self.observation(self.run(argument))
        # The host's trouble (disk full, ...) still comes back as an observation, never a crash.
        except Exception as e:  # noqa: BLE001
            return f"The sandbox could not run the code: {type(e).__name__}: {e}"

    def run(self, code: str, *, probe_only: bool = False) -> SandboxResult:
        """Run `code` in a fresh sandboxed process; never raises on anything the code does.
        probe_only: build the sandbox, print which layers are active, run nothing."""
        start = time.monotonic()
        root = os.geteuid() == 0
        uid = None
        if root and self.isolate and _uids_mapped(self.uid_base, self.uid_base + (64 << 22)):
            uid = self.uid_base + 64 * (os.getpid() % (1 << 22)) + next(_calls) % 64
        top = os.path.realpath(tempfile.mkdtemp(prefix="esopt-sandbox-"))  # as /proc/self/mountinfo shows it
        try:
            work, stage, code_path = (os.path.join(top, n) for n in ("work", "stage", "code.py"))
            os.mkdir(work, 0o700)
            os.mkdir(stage, 0o700)
            os.chmod(top, 0o711)  # the sandbox uid may pass through to work/, not list or enter the rest
            if uid is not None:
                os.chown(work, uid, uid)
            with open(code_path, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(code)
            cfg = {"code": code_path, "code_name": _CODE_NAME, "work": work, "stage": stage, "uid": uid,
                   "parent": os.getpid(), "site": list(self.site_packages), "libs": self._libs(),
                   "isolate": self.isolate, "hook": self.audit_hook, "disk_mb": self.disk_mb, "probe": probe_only,
                   "expect": {} if probe_only else self.layers, "limits": self._limits()}
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8",
                   "MPLBACKEND": "Agg", "MPLCONFIGDIR": work, **{v: "1" for v in (
                       "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")}}
            try:
                proc = subprocess.Popen(
                    [self.python, "-I", "-S", "-B", "-X", "utf8", "-c",
                     "import sys; exec(compile(sys.argv[1], '<sandbox>', 'exec'))", _BOOTSTRAP, json.dumps(cfg)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    cwd=work, env=env, start_new_session=True)
            except OSError as e:
                return SandboxResult("error", "", str(e), None, time.monotonic() - start, False,
                                     f"The sandbox could not start a process: {e}")
            try:
                out, err, truncated, timed_out = self._collect(proc, uid, start + self.timeout_s)
            finally:
                _kill_all(proc, uid)
        finally:
            shutil.rmtree(top, ignore_errors=True)
        return self._result(proc.returncode, out, err, truncated, timed_out, time.monotonic() - start)

    def observation(self, r: SandboxResult) -> str:
        """The compact text the model sees: stdout, then what went wrong, within max_output_chars."""
        if r.status == "ok":
            text = r.stdout.rstrip("\n") or "(no output: print() the values you want to see)"
            if r.stderr.strip():
                text = text.rstrip("\n") + "\n[stderr]\n" + _tail_lines(r.stderr, 10)
            return _clip(text, self.max_output_chars, r.truncated)
        if r.status in ("error", "refused", "memory") and r.stderr.strip():
            problem = _tail_lines(r.stderr, 10)
            if r.status == "memory":
                problem += f"\n({r.message})"
        else:
            problem = r.message
        problem = _clip(problem, self.max_output_chars // 2, False, tail=True)
        head = r.stdout.rstrip("\n")
        if not head:
            return problem
        head = _clip(head, max(self.max_output_chars - len(problem) - 1, 0), r.truncated)
        return head + "\n" + problem

    # -- internals --------------------------------------------------------------

    def _limits(self) -> dict[str, Any]:
        return {"RLIMIT_CPU": [self.cpu_s, self.cpu_s + 1], "RLIMIT_AS": self.memory_mb << 20,
                "RLIMIT_FSIZE": self.max_file_bytes, "RLIMIT_NOFILE": self.max_open_files,
                "RLIMIT_NPROC": self.max_processes, "RLIMIT_CORE": 0}

    def _libs(self) -> list[str]:
        """Directories the child must still read after dropping its uid: stdlib and packages."""
        stdlib = os.path.dirname(os.__file__)
        dirs = [stdlib, os.path.join(stdlib, "lib-dynload"), *self.site_packages]
        return [os.path.realpath(d) for d in dirs if os.path.isdir(d)]

    def _collect(self, proc: subprocess.Popen, uid: int | None, deadline: float
                 ) -> tuple[bytes, bytes, bool, bool]:
        """Read stdout (head) and stderr (tail) until both close and the child exits; never
        past the deadline + 1 s."""
        cap = self.capture_bytes
        out, err = bytearray(), bytearray()
        seen = 0
        pipes = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        sel = selectors.DefaultSelector()
        for fd in pipes:
            sel.register(fd, selectors.EVENT_READ)
        try:
            pidfd = os.pidfd_open(proc.pid)  # readable when the child exits
            sel.register(pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            pidfd = None  # then poll for the exit every 50 ms
        timed_out, stop_at = False, None
        try:
            while pipes or stop_at is None:  # until the pipes close and the child has exited
                now = time.monotonic()
                if stop_at is None and (now >= deadline or (pidfd is None and _exited(proc))):
                    timed_out = now >= deadline and not _exited(proc)
                    _kill_all(proc, uid)  # descendants would otherwise keep the pipes open
                    stop_at = now + 1.0
                if stop_at is not None and now >= stop_at:
                    break  # something still holds a pipe: give up on it rather than hang
                wait = (stop_at or deadline) - now
                for key, _ in sel.select(max(min(wait, 0.05) if pidfd is None else wait, 0.0)):
                    if key.fd == pidfd:
                        sel.unregister(pidfd)
                        _kill_all(proc, uid)
                        stop_at = time.monotonic() + 1.0
                        continue
                    data = os.read(key.fd, 1 << 16)
                    buf = pipes[key.fd]
                    if not data:
                        sel.unregister(key.fd)
                        del pipes[key.fd]
                    elif buf is out:
                        seen += len(data)
                        buf += data[: max(cap - len(buf), 0)]
                    else:
                        buf += data
                        if len(buf) > 2 * cap:
                            del buf[:-cap]
        finally:
            sel.close()
            if pidfd is not None:
                os.close(pidfd)
        return bytes(out), bytes(err[-cap:]), seen > cap, timed_out

    def _result(self, rc: int | None, out: bytes, err: bytes, truncated: bool, timed_out: bool,
                wall_s: float) -> SandboxResult:
        stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
        exc = last.split(":", 1)[0].strip()
        if timed_out:
            status, msg = "timeout", f"Timed out after {self.timeout_s:g} s (wall clock); the process was killed."
        elif rc == 0:
            status, msg = "ok", ""
        elif rc == -signal.SIGXCPU:
            status, msg = "timeout", f"Stopped after {self.cpu_s} s of CPU time (the CPU limit); the process was killed."
        elif rc == _SETUP_FAILED and stderr.startswith("sandbox setup failed"):
            status, msg = "error", stderr.strip()
        elif exc.endswith("MemoryError"):
            status, msg = "memory", f"out of memory: the sandbox allows {self.memory_mb} MiB"
        elif exc == "SandboxViolation":
            status, msg = "refused", last.strip()
        elif rc is not None and rc < 0:
            status, msg = "killed", f"The process was killed by {signal.Signals(-rc).name}."
        else:
            status, msg = "error", last.strip() or f"The process exited with status {rc}."
        return SandboxResult(status, stdout, stderr, rc, wall_s, truncated, msg)


@functools.cache
def _probe(python: str, site_packages: tuple[str, ...], isolate: bool, audit_hook: bool,
           uid_base: int) -> tuple[tuple[str, bool], ...]:
    box = PythonSandbox(site_packages=site_packages, isolate=isolate, audit_hook=audit_hook,
                        uid_base=uid_base, python=python, timeout_s=30)
    r = box.run("", probe_only=True)
    if r.status != "ok":
        raise RuntimeError(f"the Python sandbox cannot start here: {r.message or r.stderr}")
    return tuple(json.loads(r.stdout).items())


def _kill_all(proc: subprocess.Popen, uid: int | None) -> None:
    """SIGKILL the process group, reap the child, then kill every live process of the
    call's private uid (setsid() leaves the group, not the uid)."""
    if proc.returncode is None:  # not reaped yet, so the pgid cannot have been reused
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    if uid is None:
        return
    give_up = time.monotonic() + 2.0
    while (pids := _live_pids_of_uid(uid)) and time.monotonic() < give_up:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)


@functools.cache
def _uids_mapped(first: int, end: int) -> bool:
    """Whether uids [first, end) exist in this user namespace (a container may map fewer)."""
    try:
        with open("/proc/self/uid_map") as f:
            maps = [tuple(map(int, line.split())) for line in f]
    except OSError:
        return False
    return any(inside <= first and end <= inside + count for inside, _, count in maps)


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it (its pid still names the group)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _live_pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        state = status.split(b"\nState:\t", 1)[-1][:1]
        uids = status.split(b"\nUid:\t", 1)[-1].split(b"\n", 1)[0].split()
        if state not in (b"Z", b"X") and str(uid).encode() in uids:
            pids.append(int(entry.name))
    return pids


def _tail_lines(text: str, n: int) -> str:
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines if len(lines) <= n else ["...", *lines[-n:]])


def _clip(text: str, limit: int, truncated: bool, tail: bool = False) -> str:
    """At most `limit` characters, with a marker where text was cut (head kept, or tail)."""
    if len(text) <= limit and not truncated:
        return text
    marker = "[... output truncated]"
    keep = max(limit - len(marker) - 1, 0)
    if tail:
        return marker + "\n" + text[len(text) - keep:]
    return text[:keep] + "\n" + marker
