"""The sandboxed side of the grader: runs a submission's functions on given inputs.

Started by :mod:`mha.grading.sandbox` as ``python -I -S worker.py JOBDIR``, or forked
for one submission by a zygote (``worker.py --zygote``, see ``zygote``) that has done
the preloading of step 5 once and nothing else; the forked child then goes through the
same steps, from 1, as a fresh worker. Everything
here is trusted only until the student's code is loaded; after that the process is
assumed hostile, which is why it may only leave plain data behind (``out/<i>.json`` and
``out/<i>.bin``, raw array bytes indexed by the JSON) and why the grader, not this process, decides what any of it is worth.

Order of events:
1. read ``JOBDIR/config.json`` (written by the grader);
2. confine itself (``confine.py``): the strongest isolation the machine allows (namespaces
   as root, a user namespace, or Landlock), a fork into a keeper that kills whatever the
   submission leaves behind and the child that goes on, resource limits, an unprivileged
   user or no capabilities, and a seccomp filter; the child writes ``L <level>`` on the
   progress pipe, and stops there if that level is below the one the grader requires;
3. (numpy and torch are imported, and ``mha`` made importable only as a stub whose
   functions raise, before step 2: the hidden files are then out of reach);
4. run the submission's kept statements, then each exercise's cases, reporting progress
   (``S i`` / ``D i``) on a pipe so that the grader can enforce per-exercise time limits.

This file imports nothing from the course package but ``mha/autograde/wire.py`` and
``mha/autograde/calls.py``, and its neighbours ``confine.py``, ``namespaces.py``, ``landlock.py``
and ``seccomp.py`` (all loaded by path, first), so it can run while that is hidden.
``worker.py --probe JOBDIR`` only confines itself and says the level (``sandbox.probe``).
"""

from __future__ import annotations

import json
import os
import signal
import sys


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def load_confinement():
    """``confine.py`` and the modules it applies, loaded from this folder by path, once."""
    here = os.path.dirname(os.path.abspath(__file__))
    names = ("confine", "namespaces", "landlock", "seccomp")
    if "_mha_confine" not in sys.modules:
        import importlib.util

        for name in names:
            spec = importlib.util.spec_from_file_location(f"_mha_{name}", os.path.join(here, f"{name}.py"))
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
    return [sys.modules[f"_mha_{name}"] for name in names]


# Imported before the privileges go: the unprivileged user may not be able to read the
# interpreter's own library (e.g. a Python installed under /root).
PRELOAD = ("ast", "builtins", "types", "json", "zipfile", "importlib.abc", "importlib.machinery",
           "math", "cmath", "random", "functools", "itertools", "collections", "typing",
           "dataclasses", "operator", "copy", "re", "string", "statistics", "fractions",
           "decimal", "warnings", "numpy", "torch", "torch.nn", "torch.nn.functional", "einops")


def preload(plain) -> None:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # One round trip through every code path we use later, so that lazy imports happen now.
    import numpy as np
    import torch

    arrays: dict = {}
    tree = plain.encode((torch.ones(2, dtype=torch.float16) * 2, {"a": (1, 2.5)}, None, True), arrays)
    index, data = plain.pack(arrays)
    plain.noncontiguous(plain.decode_input(tree, plain.unpack(index, data))[0])
    torch.softmax(torch.ones(2, 2), dim=-1).masked_fill(torch.ones(2, 2, dtype=torch.bool), float("-inf"))
    json.dumps(json.loads("[1]"))
    calls = load_calls()  # and one graded call, recorded and trapped, of everything it imports
    calls.run_case(lambda x: x.amax(dim=-1), [torch.ones(2, 2)], plain=plain, arrays={},
                   noncontiguous=(0,), traps=["torch.nn.functional.softmax", "torch.Tensor.softmax"], trace=True)


# ----------------------------------------------------------------------------- stand-ins

def install_mha_stub(types_mod) -> None:
    """Make ``import mha`` (and any submodule) give a stub: every attribute is a callable
    that raises ForbiddenCall; ``mha.exercises.check`` does nothing."""
    import importlib.abc
    import importlib.machinery

    ForbiddenCall = load_calls().ForbiddenCall

    def trap(name):
        def forbidden(*args, **kwargs):
            raise ForbiddenCall(f"{name} is not available to graded functions: write it with torch")
        forbidden.__name__ = name.rsplit(".", 1)[-1]
        return forbidden

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            mod = types_mod.ModuleType(spec.name)
            mod.__path__ = []
            mod.__getattr__ = lambda attr, _n=spec.name: (
                (lambda *a, **k: None) if (_n, attr) == ("mha.exercises", "check") else trap(f"{_n}.{attr}"))
            return mod

        def exec_module(self, module):
            pass

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "mha" or fullname.startswith("mha."):
                return importlib.machinery.ModuleSpec(fullname, Loader(), is_package=True)
            return None

    for name in [n for n in sys.modules if n == "mha" or n.startswith("mha.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, Finder())


# ----------------------------------------------------------------------------- running

def run(jobdir: str, cfg, progress_fd: int, plain, calls=None) -> None:
    import ast
    import builtins
    import types

    import numpy as np
    import torch

    calls = calls or load_calls()
    run_case = calls.make_runner()  # bound now, before any student code runs, and kept local
    torch.set_num_threads(1)
    install_mha_stub(types)

    def say(msg: str):
        try:
            os.write(progress_fd, (msg + "\n").encode())
        except OSError:
            pass

    if any(job.get("launches") for job in cfg["run"]):
        try:  # before the submission, so that its kernel launches can be counted (autograde/calls.py)
            import triton  # noqa: F401  (TRITON_INTERPRET=1 is in the environment: its interpreter)
        except Exception:
            pass
    out = os.path.join(jobdir, "out")
    ns = {"__name__": "__main__", "__builtins__": builtins}
    load_errors = []
    with open(os.path.join(jobdir, "submission.py"), encoding="utf-8") as f:
        source = f.read()
    _register_source("<submission>", source)
    tree = ast.parse(source)
    for stmt in tree.body:  # one statement at a time: a failing import spoils only its users
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), "<submission>", "exec"), ns)
        except BaseException as e:  # noqa: BLE001 - student code may raise anything
            load_errors.append(f"line {stmt.lineno}: {type(e).__name__}: {str(e)[:200]}")
    _write(os.path.join(out, "load.json"), json.dumps({"errors": load_errors[:5]}).encode())

    with open(os.path.join(jobdir, "in", "cases.json"), encoding="utf-8") as f:
        specs = json.load(f)
    with open(os.path.join(jobdir, "in", "cases.bin"), "rb") as f:
        arrays = plain.unpack(specs["arrays"], f.read())
    for job in cfg["run"]:
        i = job["index"]
        say(f"S {i}")
        spec = specs["exercises"][str(i)]
        fn = ns.get(job["function"])
        results, out_arrays = [], {}
        if fn is None or not callable(fn):
            results = [{calls.STATUS: calls.MISSING} for _ in spec["cases"]]
        else:
            layouts = spec.get("noncontiguous") or [[] for _ in spec["cases"]]
            for case, strided in zip(spec["cases"], layouts):
                args = [plain.decode_input(a, arrays) for a in case]
                results.append(run_case(fn, args, plain=plain, arrays=out_arrays, noncontiguous=tuple(strided),
                                        traps=job.get("traps", []), trace=bool(job.get("trace")),
                                        launches=bool(job.get("launches"))))
        index, data = plain.pack(out_arrays)
        _write(os.path.join(out, f"{i}.bin"), data)
        _write(os.path.join(out, f"{i}.json"), json.dumps({"results": results, "arrays": index}).encode())
        say(f"D {i}")


def _register_source(filename: str, source: str) -> None:
    """Make the submission's source readable by ``inspect.getsource``, as IPython does for
    a notebook's cells: Triton's interpreter reads a kernel's source to rewrite it before
    running it. Without the source it runs the function as written, silently wrong where
    the rewriting matters (``lo <= x < hi`` then means ``x < hi``)."""
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _load_by_path(filename: str, name: str):
    import importlib.util

    path = os.path.join(AUTOGRADE, filename)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# The folder of the two free-standing modules of the exercise framework that the worker loads.
AUTOGRADE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "autograde")


def load_plain():
    """The framework's module of plain values (``mha/autograde/wire.py``), loaded from its
    file on its own: nothing else of the course package is imported here."""
    return _load_by_path("wire.py", "plain")


def load_calls():
    """The framework's module that calls a graded function (``mha/autograde/calls.py``, the
    procedure ``check`` follows too), loaded from its file on its own."""
    if "_mha_calls" in sys.modules:
        return sys.modules["_mha_calls"]
    return _load_by_path("calls.py", "_mha_calls")


def sandboxed(jobdir: str, cfg, progress_fd: int, plain) -> None:
    """Steps 2 to 4 for one submission, in a process that has preloaded (``main``, or a
    child forked by the zygote); never returns."""
    confine, *modules = load_confinement()
    cfg["jobdir"] = jobdir
    level = confine.confine(cfg, progress_fd, _libc(), modules)
    try:
        os.write(progress_fd, f"L {confine.LEVELS.index(level)}\n".encode())
    except OSError:
        pass
    if confine.LEVELS.index(level) > confine.LEVELS.index(cfg.get("require", "landlock")):
        os._exit(confine.REFUSED_EXIT)  # the grader says why
    if cfg.get("probe"):
        os._exit(0)
    os.chdir(os.path.join(jobdir, "work"))
    try:
        run(jobdir, cfg, progress_fd, plain)
    finally:
        sys.stdout.flush()
    os._exit(0)


def main(argv) -> None:
    if len(argv) > 1 and argv[1] == "--zygote":
        zygote(argv)
    jobdir = argv[2] if argv[1] == "--probe" else argv[1]
    with open(os.path.join(jobdir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    progress_fd = cfg["progress_fd"]
    if argv[1] == "--probe":  # no submission: how far confinement gets, without torch
        sandboxed(jobdir, {**cfg, "probe": True}, progress_fd, None)
    sys.path[:0] = [p for p in cfg.get("site", []) if p not in sys.path]
    plain = load_plain()  # before the package directory is hidden
    preload(plain)
    load_confinement()
    sandboxed(jobdir, cfg, progress_fd, plain)


# ----------------------------------------------------------------------------- zygote

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36


def zygote(argv) -> None:
    """``python -I -S worker.py --zygote '{"site": [...], "fd": N}'``: import numpy and
    torch once (steps 1 and 5's preloading, nothing of the course), then, for each request
    read from the socket ``fd`` (JSON naming a job folder, its work folder and environment,
    with the progress pipe and the stderr file attached), fork a child that becomes
    exactly what ``main`` is after preloading, for that one submission, and exits.

    The zygote itself never loads a submission, never reads a job folder, and keeps no
    state from one request to the next: every child starts from the same preloaded state.
    It answers ``{"pid": n}`` once the child is forked and ``{"exit": code}`` once it has
    reaped it; it exits when the socket closes."""
    import socket

    boot = json.loads(argv[2])
    sys.path[:0] = [p for p in boot.get("site", []) if p not in sys.path]
    plain = load_plain()
    preload(plain)
    import torch

    torch.set_num_threads(1)
    libc = _libc()
    import gc

    gc.collect()
    gc.freeze()  # the children's collections skip the preloaded objects (fewer copied pages)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # a same-user child cannot ptrace or read it
    # Orphans of its children come to it, and it kills them (confine.reap_all): a keeper
    # killed before it could clean up leaves nothing behind either.
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    reap_all = load_confinement()[0].reap_all
    sock = socket.socket(fileno=boot["fd"])

    def send(obj) -> None:
        sock.send(json.dumps(obj).encode())

    send({"ready": True, "threads": len(os.listdir("/proc/self/task"))})
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        req = json.loads(msg)
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            send({"error": "expected two file descriptors"})
            continue
        zygote_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                # Until its user changes (which clears this), the child dies with the
                # zygote: a child the grader never heard of does not run on.
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                if os.getppid() != zygote_pid:
                    os._exit(73)
                _zygote_child(req, fds[0], fds[1], plain, libc)
            finally:
                os._exit(71)
        for fd in fds:
            os.close(fd)
        send({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reap_all()
        send({"exit": os.waitstatus_to_exitcode(status)})


def _zygote_child(req, progress_fd: int, stderr_fd: int, plain, libc) -> None:
    """In the forked child: what ``subprocess.Popen`` does for ``main`` (new session,
    stdin and stdout on /dev/null, stderr to the job's file, no other file descriptor
    open, the scrubbed environment, the work folder as the current directory), then the
    same steps as ``main`` after preloading."""
    os.setsid()
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a freshly started worker
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(stderr_fd, 2)
    if progress_fd < 3:  # pragma: no cover - 0, 1 and 2 are open in the zygote
        os._exit(72)
    os.closerange(3, progress_fd)  # the zygote's socket among them
    os.closerange(progress_fd + 1, 1 << 20)
    os.environ.clear()
    os.environ.update(req["env"])
    if "tempfile" in sys.modules:  # forget a temporary folder chosen under the zygote's environment
        sys.modules["tempfile"].tempdir = None
    os.chdir(req["cwd"])
    jobdir = req["jobdir"]
    sys.argv = [sys.argv[0], jobdir]
    with open(os.path.join(jobdir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["progress_fd"] = progress_fd
    sandboxed(jobdir, cfg, progress_fd, plain)


if __name__ == "__main__":
    main(sys.argv)

