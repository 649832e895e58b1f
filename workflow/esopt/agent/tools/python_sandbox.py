"""`PythonSandbox`: the `python` tool, which runs model-written code in a throwaway process.

Model output is untrusted, so every call runs in a separate, short-lived interpreter
(`python -I -S -B`, no site processing: fast start) in a fresh temporary directory that
is deleted afterwards, with a minimal environment (no inherited variables, HOME and
TMPDIR point at the working directory). The parent reads the output through pipes with
a byte cap and a deadline, so floods, silence, closed pipes or processes that linger
cannot hang it; at the end it kills the whole process group (and, as root, every
process of the call's uid), so nothing of a call survives it.

The kernel is the boundary; the audit hook in front of it only gives readable refusals.
`PythonSandbox.layers` says which layers are active here (probed once per process; a
layer that is unavailable is skipped and reported, never faked; a call that comes up
with fewer layers than the probe found fails its setup). `log_layers()` logs them,
`provenance()` is what run records keep, and `require_all_layers=True` raises at
construction, naming what is missing, instead of running with fewer. Outermost first:

- rlimits (always): CPU seconds (RLIMIT_CPU), address space (RLIMIT_AS: a too-large
  allocation is a MemoryError), bytes per written file (RLIMIT_FSIZE), open files,
  processes/threads (RLIMIT_NPROC), no core dumps; plus the parent's wall-clock
  timeout, which SIGKILLs the process group.
- unprivileged_uid (root only): the child drops to a uid/gid of its own (one per
  call, from a high range no account uses: `uid_base`, default 2**30, and up) with no
  supplementary groups, so file permissions apply and RLIMIT_NPROC counts (it never
  applies to root). Since the uid is private to the call, the parent can kill every
  leftover process by uid.
- no_new_privs (Linux): execve() of setuid binaries grants nothing.
- network_namespace: a network namespace holding only a down loopback device, so there
  is no network even for native code, nor the host's abstract AF_UNIX names (they
  belong to a network namespace). As root this is CLONE_NEWNET; otherwise it, and the
  namespaces below, live in an unprivileged user namespace, whose capabilities are all
  dropped before the code runs.
- ipc_namespace: System V IPC and POSIX message queues of its own.
- pid_namespace: the bootstrap forks pid 1 of a fresh PID namespace, which forks the
  process that runs the code (pid 2), and mounts a fresh read-only /proc: /proc lists
  only the call's processes, the parent's pid does not exist there, and when pid 2
  exits, pid 1 exits and the kernel kills whatever is left in the namespace (setsid()
  or not). The process the parent started and pid 1 only wait and pass pid 2's exit
  status on (a signal as the same signal), so timeouts, the CPU limit and memory errors
  read as without it; each level gets SIGKILL when the one above dies
  (PR_SET_PDEATHSIG). A call that exits by itself then needs no sweep by uid.
- read_only_filesystem: a private mount namespace in which every mount is remounted
  read-only (MS_BIND remounts: per-mount flags, the host's mounts are not touched) and
  the working directory is a fresh tmpfs (size-capped, noexec, so code written there
  cannot be loaded as a native library). As root, directories on the way to the
  interpreter's libraries that the sandbox uid may not enter (pyenv under a 0700 /root,
  say) are covered with a tmpfs that holds only bind mounts of the needed library
  directories; the rest of them stays hidden.
- hidden_host_dirs: /tmp, /var/tmp, /run (and /var/run), /var/lock, /dev/shm and
  /dev/mqueue, where other processes keep their sockets and shared memory, are covered
  with empty read-only tmpfs; the path to the working directory and the library
  directories under them (a virtualenv in /tmp) are put back (bind mounts through a
  descriptor opened before the cover).
- seccomp: a system-call filter installed after the setup above and before any of the
  code runs, inherited by everything it starts; built once per process by the parent
  with libseccomp (libseccomp.so.2 through ctypes: it knows this architecture's
  numbers; `python` must be of the parent's architecture). Default allow; EPERM for
  SECCOMP_DENY: socket and socketpair of every family (no tool needs a socket;
  multiprocessing then fails with a clear OSError), ptrace, process_vm_readv/writev,
  pidfd_getfd, mount/umount, the new mount API, chroot, pivot_root, unshare, setns,
  keyctl/add_key/request_key, bpf, perf_event_open, userfaultfd, io_uring,
  personality, modify_ldt and root's administrative calls (modules, kexec, reboot,
  swap, ...); EPERM for clone with a namespace flag and ioctl TIOCSTI/TIOCLINUX; ENOSYS
  for clone3, whose flags a filter cannot read (glibc then falls back to clone). A system
  call of another ABI (int 0x80, x32) kills the process (SIGSYS).
- audit_hook: a `sys.addaudithook` hook, installed by the bootstrap before the model's
  code runs, refuses (PermissionError subclass `SandboxViolation`): sockets and name
  lookups (`socket.*`), process creation (`os.fork`, `os.forkpty`, `os.system`,
  `os.exec`, `os.posix_spawn`, `subprocess.Popen`, `pty.spawn`; the undocumented
  `_posixsubprocess.fork_exec` is replaced by a stub), signals to other processes,
  `open` for writing and `os.remove/rename/mkdir/rmdir/chmod/chown/utime/truncate/
  link/symlink/setxattr/removexattr` outside the working directory (paths resolved
  with realpath), `os.open` of directories outside it, every `ctypes.*` event except
  the `dlopen(None)` that `import ctypes` (and so numpy) performs, raising rlimits,
  `gc.get_objects/get_referrers/get_referents` and `sys.settrace/setprofile`,
  `fcntl.ioctl`, `syslog.*`, and setting a function's `__code__` (or the defaults of
  its own helper). Its state is bound as default arguments: the frames of a refused
  call, which the code reaches through the exception's traceback, hold only read-only
  tables and functions whose code it will not let change. Event names were checked
  against the Python 3.11 audit events table and the strings of this 3.11 build.

Limits, honestly: the audit hook can still be bypassed (module attributes that the
library functions it calls look up, such as posixpath's, can be rebound; a reloaded
`_posixsubprocess`; an `os.open` with `dir_fd`; native code), which is why it is not
the boundary. With every layer active a bypass has no socket of any kind, no network,
no new namespace, no ptrace, no mount, no writable place but its tmpfs, no view of other
processes, runs as an unprivileged uid with at most `max_processes` tasks and dies with
everything it started. What stays open: it can read world-readable files (the host's
/etc, /sys, the libraries, world-readable project files), and the filter is a deny
list, so system calls not on it are allowed, including ones newer than this
libseccomp knows by name (2.5.4 here does not know open_tree_attr, which needs a
capability the code does not have). Without root there is no uid drop: the code runs as
the parent's user (with no capabilities), so where read-only remounts fail it can write
what that user can. Without user namespaces (non-root) only rlimits, no_new_privs,
seccomp and the hook remain, and a process that calls setsid() can outlive the call.
Without libseccomp the namespaces still hold, but a bypass can create sockets (inside
the empty network namespace, with the host's socket directories hidden) and nested
user namespaces (whose mounts stay locked). Uids are picked per call as
`uid_base + 64 * (parent pid % 2**22) + (call counter % 64)`: unique within one PID
namespace unless one process runs more than 64 calls at once. A parent killed with
SIGKILL leaves its temporary directory behind (the call's processes die with it).

The code's process ends with os._exit (after joining its threads, running atexit handlers
and flushing) rather than the interpreter's teardown, which in a forked process copies
every page it touches (the cost of a call: docs/tool_agents.md, Python sandbox latency).
"""

from __future__ import annotations

import errno
import functools
import itertools
import json
import logging
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

log = logging.getLogger("esopt.python_sandbox")

Status = Literal["ok", "error", "timeout", "memory", "refused", "killed"]

_SETUP_FAILED = 121  # exit status of the bootstrap when it cannot build the sandbox
_CODE_NAME = "<code>"  # the file name tracebacks show for the model's code

# The layers of defense, outermost first (the module doc says what each does and needs).
LAYERS = ("rlimits", "unprivileged_uid", "no_new_privs", "network_namespace", "ipc_namespace", "pid_namespace",
          "read_only_filesystem", "hidden_host_dirs", "seccomp", "audit_hook")
# System calls the seccomp layer answers with EPERM (the rest of the filter: _seccomp_program).
# Names that are not system calls of this architecture are skipped.
SECCOMP_DENY = (
    "socket", "socketpair",  # no tool needs a socket: every family, abstract AF_UNIX included
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",  # other processes' memory and files
    "mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
    "open_tree", "mount_setattr",  # the filesystem view
    "unshare", "setns",  # namespaces (clone's namespace flags: _seccomp_program)
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "personality", "modify_ldt",  # kernel attack surface
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "acct", "open_by_handle_at", "iopl", "ioperm", "syslog", "quotactl", "uselib", "sethostname",
    "setdomainname", "lookup_dcookie", "vhangup",  # administration (root's; denied for root too)
)


# Runs in the child before the model's code: as the parent's user, it builds the
# sandbox (namespaces, mounts, rlimits, uid drop, the seccomp filter the parent built),
# installs the audit hook, then runs the code read from a file. Passed on the command line (so it needs no readable file
# of its own) and compiled as "<sandbox>", so tracebacks can leave its frames out.
_BOOTSTRAP = r'''
import json, os, sys
cfg = json.loads(sys.argv[2])
with open(cfg["code"], encoding="utf-8", errors="surrogatepass") as f:
    SOURCE = f.read()  # read while still privileged: the code file is the parent's


class SandboxViolation(PermissionError):
    pass


def setup(cfg):
    """Build the kernel layers; returns which are active. Runs before any untrusted code."""
    import ctypes, resource
    CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
        0x20000, 0x8000000, 0x10000000, 0x20000000, 0x40000000)
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
    MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
    PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 1, 4, 22, 38, 2
    SIGKILL = 9
    KEEP = {"nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048,
            "relatime": 1 << 21, "strictatime": 1 << 24}
    # Host directories where other processes keep sockets and shared state: covered by an
    # empty read-only tmpfs (the working directory and library directories under them are
    # put back).
    HIDDEN = ("/tmp", "/var/tmp", "/run", "/var/run", "/var/lock", "/dev/shm", "/dev/mqueue")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4

    def ok(ret):
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def mount(src, dst, fstype, flags, data=None):
        enc = lambda s: None if s is None else os.fsencode(s)
        ok(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)))

    def unshare(flags):
        return libc.unshare(flags) == 0

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
        bind mounts of only the children needed (shallowest first, repeat). The bind
        mounts wait on a tmpfs over `stage` meanwhile, unmounted at the end."""
        staged = 0
        try:
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
                if not staged:
                    mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,size=64k")
                for parent, kids in need.items():
                    saved = []
                    for kid in sorted(kids):
                        staged += 1
                        s = os.path.join(stage, str(staged))
                        os.mkdir(s)
                        mount(kid, s, None, MS_BIND | MS_REC)
                        saved.append((kid, s))
                    mount("tmpfs", parent, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
                    for kid, s in saved:
                        os.mkdir(kid)
                        mount(s, kid, None, MS_BIND | MS_REC)
                        ok(libc.umount2(os.fsencode(s), 2))  # MNT_DETACH
            return False
        finally:
            if staged:
                ok(libc.umount2(os.fsencode(stage), 2))

    def read_only():
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().splitlines()
        import codecs
        for line in lines:
            fields = line.split(b" ")
            target = codecs.escape_decode(fields[4])[0]
            opts = fields[5].decode().split(",")
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID  # MS_BIND: this mount only, not the host's superblock
            for o in opts:
                flags |= KEEP.get(o, 0)
            try:
                mount(None, target, None, flags)
            except OSError:
                if os.path.exists(target):  # gone or shadowed mounts do not matter
                    raise

    def hide(work, keep):
        """Cover HIDDEN with empty read-only tmpfs; put back the paths to `work` (empty
        directories: its own tmpfs comes next) and the `keep` directories (bind mounts
        through a descriptor opened before the cover). False if one had to stay visible."""
        complete = True
        for d in HIDDEN:
            if not os.path.isdir(d) or os.path.realpath(d) != d:
                continue  # absent, or a symbolic link (/var/run -> /run): covered where it points
            if any(d == k or d.startswith(k + "/") for k in keep):
                complete = False  # the interpreter's libraries live there: cannot cover it
                continue
            back = [(k, os.open(k, os.O_PATH | os.O_DIRECTORY)) for k in keep if k.startswith(d + "/")]
            mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k")
            for k, fd in back:
                os.makedirs(k, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", k, None, MS_BIND | MS_REC)
                os.close(fd)
            if work.startswith(d + "/"):
                os.makedirs(work, exist_ok=True)
            mount(None, d, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        return complete

    def split():
        """After unshare(CLONE_NEWPID): fork pid 1 of the new namespace, which forks the
        process that goes on (pid 2) and reaps until pid 2 exits. This process and pid 1 run
        nothing else: they pass pid 2's exit status on (a signal as the same signal). When
        pid 1 exits the kernel kills whatever is left in the namespace."""
        import _signal, select
        libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
        if os.getppid() != cfg["parent"]:
            os._exit(1)  # the parent died before that
        r, w = os.pipe()  # pid 1 -> this process: pid 2's wait status
        init = os.fork()
        if init:
            os.close(w)
            status = os.waitpid(init, 0)[1]
            data = os.read(r, 32)
            status = int(data) if data else status
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no core dump of this process
                if sig not in (_signal.SIGKILL, _signal.SIGSTOP):
                    _signal.signal(sig, _signal.SIG_DFL)
                os.kill(os.getpid(), sig)
                os._exit(128 + sig)
            os._exit(os.waitstatus_to_exitcode(status))
        os.close(r)
        libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        poll = select.poll()
        poll.register(w, select.POLLOUT)
        if any(ev & select.POLLERR for _, ev in poll.poll(0)):
            os._exit(1)  # the process above died before that: nobody would wait for us
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)  # pid 1 ignores signals it has no handler for
        child = os.fork()
        if child:
            while True:
                pid, status = os.wait()
                if pid == child:
                    os.write(w, str(status).encode())
                    os._exit(0)
        os.close(w)

    def drop_capabilities():
        """All capabilities off (those a user namespace gave, as a non-root parent)."""
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (x2): none
        ok(libc.capset(header, data))

    def seccomp(program):
        """Install the system-call filter the parent built (`_seccomp_program`); True once
        it is in the kernel. Needs no_new_privs (or root)."""
        class Prog(ctypes.Structure):  # struct sock_fprog
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        code = ctypes.create_string_buffer(program, len(program))
        prog = Prog(len(program) // 8, ctypes.addressof(code))  # 8 bytes per struct sock_filter
        return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) == 0

    layers = dict.fromkeys(cfg["layers"], False)
    root, uid, work, libs = os.geteuid() == 0, cfg["uid"], cfg["work"], cfg["libs"]
    userns = own_mounts = pid_ns = False
    if cfg["isolate"]:
        if not root:
            real_uid, real_gid = os.getuid(), os.getgid()
            userns = unshare(CLONE_NEWUSER)
            if userns:
                for name, text in (("setgroups", "deny"), ("uid_map", f"{real_uid} {real_uid} 1"),
                                   ("gid_map", f"{real_gid} {real_gid} 1")):
                    with open(f"/proc/self/{name}", "w") as f:
                        f.write(text)
        if root or userns:
            layers["network_namespace"] = unshare(CLONE_NEWNET)
            layers["ipc_namespace"] = unshare(CLONE_NEWIPC)
            own_mounts = (userns or uid is not None) and unshare(CLONE_NEWNS)
            pid_ns = own_mounts and unshare(CLONE_NEWPID)
        if pid_ns:
            split()  # from here on: pid 2 of the new PID namespace
        if own_mounts:
            os.umask(0o022)
            try:
                mount("none", "/", None, MS_REC | MS_PRIVATE)  # nothing below may propagate to the host
                if not root or open_up(libs, work):
                    read_only()
                    layers["read_only_filesystem"] = True
            except OSError:
                pass  # the uid drop below checks what the libraries' paths look like now
            try:
                layers["hidden_host_dirs"] = hide(work, libs)
            except OSError:
                pass
            mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  f"size={cfg['disk_mb']}m,mode=0700" + (f",uid={uid},gid={uid}" if root else ""))
            if pid_ns:
                try:
                    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
                    layers["pid_namespace"] = True
                except OSError:
                    pass
    os.chdir(work)  # again: a tmpfs may now cover the directory the process started in
    limits = cfg["limits"]
    for name, value in limits.items():
        soft, hard = value if isinstance(value, list) else (value, value)
        resource.setrlimit(getattr(resource, name), (soft, hard))
    layers["rlimits"] = True
    if cfg["isolate"] and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        layers["no_new_privs"] = True
    if root and uid is not None and (layers["read_only_filesystem"] or not any(closed(d) for d in libs)):
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            layers["unprivileged_uid"] = os.getuid() == uid
        except OSError:
            pass
    if userns:
        drop_capabilities()  # or the code could undo the mounts above in its own namespace
    if not pid_ns:
        libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)  # set after the uid change, which clears it
        if os.getppid() != cfg["parent"]:
            os._exit(1)  # the parent died before that
    if cfg["isolate"] and cfg["seccomp"] and (layers["no_new_privs"] or root):
        layers["seccomp"] = seccomp(bytes.fromhex(cfg["seccomp"]))
    return layers


def install_hook(work):
    """The audit hook: clear refusals for ordinary code (a filter, not the boundary: see the
    module doc). Its state is bound as default arguments: a refused call's traceback leads
    to the hook's frame, whose locals then hold read-only tables and functions whose code
    and defaults the hook itself refuses to let change."""
    import _posixsubprocess
    from os.path import isdir, join, realpath
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def fork_exec(*args, **kwargs):
        raise SandboxViolation("starting processes is not allowed in this sandbox")
    _posixsubprocess.fork_exec = fork_exec  # called directly by multiprocessing, unaudited

    def inside(path, dir_fd=None, root=realpath(work), fsdecode=os.fsdecode, join=join, readlink=os.readlink,
               realpath=realpath, isinstance=isinstance, int=int, Exception=Exception):
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
    read_only = type(type.__dict__)  # mappingproxy

    def hook(event, args, reasons=read_only(reasons), writes=read_only(writes), inside=inside, WRITE=WRITE,
             fsdecode=os.fsdecode, isdir=isdir, getpid=os.getpid, isinstance=isinstance, str=str,
             function=type(inside), Violation=SandboxViolation):
        why = None
        if event == "open":
            path, mode, flags = args
            writing = flags & WRITE or (isinstance(mode, str) and ("w" in mode or "a" in mode or "x" in mode
                                                                   or "+" in mode))
            if writing and not inside(path):
                why = f"writing {fsdecode(path)!r} (only the working directory is writable)"
            elif not writing and mode is None and not inside(path) and isdir(path):
                why = f"opening the directory {fsdecode(path)!r}"  # a dir_fd could escape the path check
        elif event in writes:
            for p, d in writes[event]:
                if not inside(args[p], None if d is None else args[d]):
                    why = f"{event} on {args[p]!r} (only the working directory is writable)"
        elif event == "object.__setattr__" or event == "object.__delattr__":
            if isinstance(args[0], function) and (args[1] == "__code__" or args[0] is inside):
                why = f"{event} {args[1]}: changing a function's code"
        else:
            reason = reasons.get(event)
            if reason is None:
                return
            if event == "ctypes.dlopen" and args[0] is None:
                return  # `import ctypes` (numpy does it) opens the main program; symbols stay refused
            if event == "os.kill" and args[0] in (0, getpid()):
                return
            why = f"{event}: {reason}"
        if why is not None:
            raise Violation(why + " is not allowed in this sandbox")

    sys.addaudithook(hook)


def run(source):
    """Run the code as `__main__`; returns the exit status the interpreter would give it."""
    import builtins
    builtins.exit = builtins.quit = sys.exit  # -S leaves them out; models call exit()
    main = type(sys)("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [_CODE_NAME]
    try:
        exec(compile(source, _CODE_NAME, "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return (e.code or 0) & 0xFF
        print(e.code, file=sys.stderr)  # as the interpreter does
        return 1
    except BaseException as e:
        import linecache, traceback
        linecache.cache[_CODE_NAME] = (len(source), None, source.splitlines(True), _CODE_NAME)
        tb = None if isinstance(e, SyntaxError) else e.__traceback__.tb_next  # skip this frame
        sys.stdout.flush()
        report = traceback.TracebackException(type(e), e, tb)
        report.stack = traceback.StackSummary.from_list(
            [f for f in report.stack if f.filename != "<sandbox>"])  # the audit hook's frames
        print("".join(report.format()), end="", file=sys.stderr)
        return 1
    return 0


def finish(status):
    """Exit as the interpreter would (threads joined, atexit handlers run, output flushed)
    but without its teardown, which in a forked process copies each page it touches."""
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    import atexit
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(status)


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
finish(run(SOURCE))
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
    isolate: bool = True  # the kernel layers where possible; False: rlimits (+ hook) only
    audit_hook: bool = True  # False only to test that the kernel layers hold on their own
    seccomp: bool = True  # False only to test that the other layers hold without it
    uid_base: int = 1 << 30
    python: str = sys.executable
    require_all_layers: bool = False  # True: raise at construction if a layer is unavailable here

    name = "python"

    def __post_init__(self) -> None:
        if self.require_all_layers and self.missing_layers:
            raise RuntimeError(
                f"the Python sandbox lacks layers here: {', '.join(self.missing_layers)} (all layers are "
                "required; esopt.agent.tools.python_sandbox says what each needs: root, user namespaces, libseccomp)")

    @property
    def description(self) -> str:
        return (f"run Python 3 code in a fresh, isolated process (no network, {self.timeout_s:g} s limit); "
                "print() what you need to see")

    @property
    def layers(self) -> dict[str, bool]:
        """Which layers of defense are active here (probed once per configuration)."""
        return dict(_probe(self.python, self.site_packages, self.isolate, self.audit_hook, self.seccomp,
                           self.uid_base))

    @property
    def missing_layers(self) -> list[str]:
        """The layers that are not active here (see `layers`)."""
        return [k for k, v in self.layers.items() if not v]

    def provenance(self) -> dict[str, Any]:
        """What a run's provenance records of the sandbox."""
        return {"layers": self.layers, "missing": self.missing_layers, "require_all_layers": self.require_all_layers}

    def log_layers(self) -> None:
        """Log which layers are active (once per process and set of layers); a warning if some are not."""
        _log_layers(tuple(self.layers.items()))

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
            work, code_path = os.path.join(top, "work"), os.path.join(top, "code.py")
            os.mkdir(work, 0o700)
            os.chmod(top, 0o711)  # the sandbox uid may pass through to work/, not list or enter the rest
            if uid is not None:
                os.chown(work, uid, uid)
            with open(code_path, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(code)
            program = _seccomp_program() if self.seccomp else None
            cfg = {"code": code_path, "code_name": _CODE_NAME, "work": work, "uid": uid,
                   "parent": os.getpid(), "site": list(self.site_packages), "libs": self._libs(),
                   "isolate": self.isolate, "hook": self.audit_hook, "disk_mb": self.disk_mb, "probe": probe_only,
                   "expect": {} if probe_only else self.layers, "limits": self._limits(), "layers": LAYERS,
                   "seccomp": program.hex() if program else None}
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
            swept = False
            try:
                out, err, truncated, timed_out = self._collect(
                    proc, uid, start + self.timeout_s, pid_ns=not probe_only and self.layers["pid_namespace"])
                swept = True  # _collect has killed what was left after the child exited
            finally:
                if not swept:
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

    def _collect(self, proc: subprocess.Popen, uid: int | None, deadline: float, pid_ns: bool
                 ) -> tuple[bytes, bytes, bool, bool]:
        """Read stdout (head) and stderr (tail) until both close and the child exits; never
        past the deadline + 1 s. In a PID namespace a child that exits by itself has
        exited after pid 1, and so after everything it started: no uid to sweep then."""
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
                    _kill_all(proc, None if pid_ns and not timed_out else uid)  # descendants would hold the pipes
                    stop_at = now + 1.0
                if stop_at is not None and now >= stop_at:
                    break  # something still holds a pipe: give up on it rather than hang
                wait = (stop_at or deadline) - now
                for key, _ in sel.select(max(min(wait, 0.05) if pidfd is None else wait, 0.0)):
                    if key.fd == pidfd:
                        sel.unregister(pidfd)
                        _kill_all(proc, None if pid_ns else uid)
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
        elif rc == -signal.SIGSYS:
            status, msg = "killed", "The process was killed by SIGSYS: a system call of another ABI (int 0x80, x32)."
        elif rc is not None and rc < 0:
            status, msg = "killed", f"The process was killed by {signal.Signals(-rc).name}."
        else:
            status, msg = "error", last.strip() or f"The process exited with status {rc}."
        return SandboxResult(status, stdout, stderr, rc, wall_s, truncated, msg)


@functools.cache
def _probe(python: str, site_packages: tuple[str, ...], isolate: bool, audit_hook: bool, seccomp: bool,
           uid_base: int) -> tuple[tuple[str, bool], ...]:
    box = PythonSandbox(site_packages=site_packages, isolate=isolate, audit_hook=audit_hook, seccomp=seccomp,
                        uid_base=uid_base, python=python, timeout_s=30)
    r = box.run("", probe_only=True)
    if r.status != "ok":
        raise RuntimeError(f"the Python sandbox cannot start here: {r.message or r.stderr}")
    return tuple(json.loads(r.stdout).items())


@functools.cache
def _seccomp_program() -> bytes | None:
    """The seccomp layer's filter as a BPF program (struct sock_filter[]) for this
    architecture, built once per process with libseccomp; None where libseccomp is missing.
    Default: allow. SECCOMP_DENY: EPERM; clone3: ENOSYS (its flags sit in memory, out of a
    filter's reach, and glibc then falls back to clone); clone with a namespace flag, ioctl
    TIOCSTI/TIOCLINUX: EPERM; a system call of another ABI (int 0x80, x32): the process dies."""
    import ctypes

    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        return None

    class Cmp(ctypes.Structure):  # struct scmp_arg_cmp
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]

    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(Cmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    allow, kill_process, errno_, masked_eq, badarch = 0x7FFF0000, 0x80000000, 0x50000, 7, 2

    def check(rc: int, what: str) -> None:
        if rc < 0:  # libseccomp returns -errno
            raise OSError(-rc, f"seccomp {what}: {os.strerror(-rc)}")

    def deny(name: str, err: int, *cmps: Cmp) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr != -1:  # -1: not a system call of this architecture
            check(lib.seccomp_rule_add_array(ctx, errno_ | err, nr, len(cmps), (Cmp * len(cmps))(*cmps)), name)

    ctx = lib.seccomp_init(allow)
    if not ctx:
        return None
    try:
        check(lib.seccomp_attr_set(ctx, badarch, kill_process), "SCMP_FLTATR_ACT_BADARCH")
        for name in SECCOMP_DENY:
            deny(name, errno.EPERM)
        deny("clone3", errno.ENOSYS)
        for flag in (0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000):
            deny("clone", errno.EPERM, Cmp(0, masked_eq, flag, flag))  # CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET}
        for cmd in (0x5412, 0x541C):  # TIOCSTI, TIOCLINUX: typing into a terminal
            deny("ioctl", errno.EPERM, Cmp(1, masked_eq, 0xFFFFFFFF, cmd))
        with tempfile.TemporaryFile() as f:
            check(lib.seccomp_export_bpf(ctx, f.fileno()), "export")
            f.seek(0)
            return f.read()
    except OSError as e:
        log.warning("python sandbox: cannot build the seccomp filter: %s", e)
        return None
    finally:
        lib.seccomp_release(ctx)


@functools.cache
def _log_layers(layers: tuple[tuple[str, bool], ...]) -> None:
    missing = [k for k, v in layers if not v]
    if missing:
        log.warning("python sandbox: layers active: %s; unavailable here: %s", ", ".join(k for k, v in layers if v),
                    ", ".join(missing))
    else:
        log.info("python sandbox: all %d layers active (%s)", len(layers), ", ".join(k for k, _ in layers))


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
