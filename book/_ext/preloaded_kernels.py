"""Jupyter kernels forked from a process that has already imported the lessons' libraries.

A new kernel for a lesson spends about four CPU-seconds before the lesson's first line
does anything: starting Python, importing IPython, torch, matplotlib and mha. The build
executes every lesson in a kernel of its own, so it pays that once per lesson. Here a
worker process imports those libraries once (``preload``), and each kernel is a fork of
that worker (``ForkingKernelManager``): a separate process, with its own memory and a
fresh IPython session, that finds the libraries already in ``sys.modules``. The lesson's
own ``import`` lines still run; they just have nothing left to load.

What a lesson computes does not change: built both ways, every lesson gave the same
outputs, cell by cell (the same kinds, figures included, and the same text but for
measured times). A kernel does inherit what the parent set up for itself, such as Sphinx's
filters for its own deprecation warnings. And the build's execution times no longer
include the start-up that a student's fresh kernel pays.

Only kernels that would run this same Python's ``-m ipykernel_launcher`` are forked;
any other kernel starts as usual. parallel_execution.py forks kernels on Linux only.
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import os
import signal
import sys
import uuid

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner

# What ipykernel sets MPLBACKEND to before a kernel's first cell, unless the user set one.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def preload(modules: list[str]) -> None:
    """Import ``modules`` in this process, for the kernels forked from it later.

    matplotlib reads MPLBACKEND when it is imported, and the Sphinx process may have
    imported it already (mha does), before a kernel would have set the variable. So the
    backend is set here as a kernel's own import would have set it. Only the name: the
    backend module itself is loaded in the kernel, where it hooks into IPython to show
    the figures.
    """
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    for name in modules:
        importlib.import_module(name)
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].rcParams["backend"] = os.environ["MPLBACKEND"]


class _Forked:
    """What LocalProvisioner uses of a subprocess.Popen, for a forked child."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _forget_signal_handlers() -> None:
    """Signal handling as in a new Python. The parent's event loop handles SIGINT and
    SIGTERM through a wake-up pipe that the fork shares: a signal to the kernel (an
    interrupt) would otherwise reach the parent's loop as if sent to the parent."""
    signal.set_wakeup_fd(-1)
    for signum in signal.valid_signals():
        if callable(signal.getsignal(signum)):  # set by Python code, not inherited defaults
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)


def _become_kernel(argv: list[str], env: dict[str, str], cwd: str | None) -> None:
    """In the forked child: run as ``python -m ipykernel_launcher *argv`` would, then exit
    without running the parent's exit handlers."""
    code = 1
    try:
        # Its own process group, which jupyter_client signals (an interrupt, a shutdown), in the
        # parent's session: not a new one, as jupyter_client's own kernels get (setsid). Linux
        # shares the CPU equally between sessions (autogroups) before niceness counts, so a
        # kernel in a session of its own would get as much CPU as the whole test run beside the
        # build, and the niceness that the tests take (tests/conftest.py) would not help it.
        os.setpgid(0, 0)
        _forget_signal_handlers()
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        # The parent forked from inside its event loop; the kernel starts its own.
        asyncio.events._set_running_loop(None)
        asyncio.set_event_loop(asyncio.new_event_loop())
        sys.argv = ["ipykernel_launcher", *argv]
        from ipykernel.kernelapp import IPKernelApp

        # ipykernel read JPY_PARENT_PID when the parent imported it: the value it would
        # have read, so that the kernel exits if its parent dies.
        IPKernelApp.launch_instance(argv=argv, parent_handle=int(env["JPY_PARENT_PID"]))
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0
    except BaseException:  # noqa: BLE001 -- reported on the real stderr (the kernel's is a socket)
        import traceback

        os.write(2, traceback.format_exc().encode())
    finally:
        os._exit(code)


class ForkingProvisioner(LocalProvisioner):
    """Starts an IPython kernel of this Python as a fork of this process."""

    async def launch_kernel(self, cmd: list[str], **kwargs):
        if cmd[1:3] != ["-m", "ipykernel_launcher"] or os.path.realpath(cmd[0]) != os.path.realpath(sys.executable):
            return await super().launch_kernel(cmd, **kwargs)
        env, cwd = dict(kwargs.get("env") or os.environ), kwargs.get("cwd")
        env["JPY_PARENT_PID"] = str(os.getpid())  # as jupyter_client.launcher sets it
        if cwd and not os.path.isdir(cwd):  # as Popen would say, not "the kernel died"
            raise FileNotFoundError(errno.ENOENT, "no such folder to start a kernel in", cwd)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_kernel(cmd[3:], env, cwd)
        self.process = _Forked(pid)
        self.pid = self.pgid = pid
        self.cwd = cwd
        return self.connection_info


class ForkingKernelManager(AsyncKernelManager):
    """nbclient's kernel manager (``kernel_manager_class``), with forked kernels."""

    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
            self.provisioner = ForkingProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
        return await super()._async_pre_start_kernel(**kw)
