"""``python tests/as_user.py USER CMD...``, as root: run CMD as the ordinary user USER,
made if missing, who must be able to reach this checkout and its Python.

A Python installed under /root (mode 700), or a checkout there, is out of an ordinary
user's reach. So this runs CMD in a mount namespace of its own in which each folder on the
way that others may not enter is covered by one they may, holding only the checkout and
the Python (``namespaces.expose``, as the grader does for its workers), then becomes USER
for good (no capability, no way back) and runs CMD. USER's processes then are an ordinary
user's: whatever they try (a user namespace, Landlock, reading /root) they try as USER.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
        return pwd.getpwnam(name)


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from mha.grading import namespaces

    user, cmd = argv[1], argv[2:]
    pw = ensure_user(user)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(namespaces.CLONE_NEWNS) != 0 or not namespaces.mount(
            libc, None, "/", None, namespaces.MS_REC | namespaces.MS_PRIVATE, None):
        sys.exit("as_user.py: cannot make a mount namespace (run it as root)")
    python = Path(sys.executable).resolve()
    namespaces.expose(libc, [str(ROOT), sys.prefix, sys.base_prefix, str(python.parent.parent)])
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)
    os.chdir(ROOT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SUDO_"))}
    env.update(HOME=pw.pw_dir, USER=user, LOGNAME=user, PYTHONDONTWRITEBYTECODE="1")
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main(sys.argv)
