"""External tools a target needs (linker, emulator): found on PATH, or a one-line error naming
the package that provides them. The tools and their packages are data in the target
descriptors (`linker`/`linker_package`, `emulator`/`emulator_package`).

`python -m tvmc.toolchain install` (run by `make install`) installs the Debian packages the
shipped descriptors name that are missing, where apt-get can run (root); elsewhere it prints
which ones are missing and exits 0, and the tests that need them skip naming them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys


def describe_package(package: str) -> str:
    """'deb:qemu-user' -> 'the Debian package qemu-user (apt-get install qemu-user)'; likewise pypi."""
    kind, _, name = package.partition(":")
    if kind == "deb":
        return f"the Debian package {name} (apt-get install {name})"
    if kind == "pypi":
        return f"the PyPI package {name} (pip install {name})"
    return package


def find_tool(command, package: str, what: str, error_cls) -> str:
    """Full path of `command[0]`; raises `error_cls` ("<what> '<tool>' not found; install <package>")
    when it is not on PATH."""
    path = shutil.which(command[0])
    if path is None:
        hint = f"; install {describe_package(package)}" if package else ""
        raise error_cls(f"{what} '{command[0]}' not found{hint}")
    return path


def shipped_packages() -> dict:
    """{package: [tool, ...]} of every linker and emulator the shipped descriptors name."""
    from tvmc.target import NATIVE, known_targets, resolve_target

    out: dict = {}
    for name in known_targets():
        if name == NATIVE:
            continue
        t = resolve_target(name)
        for tool, package in ((t.linker[:1], t.linker_package), (t.emulator[:1], t.emulator_package)):
            if tool and package:
                out.setdefault(package, [])
                if tool[0] not in out[package]:
                    out[package].append(tool[0])
    return out


def missing_packages(kind: str = "deb") -> list:
    """Packages of `kind` (deb, pypi) whose tools are not on PATH."""
    return sorted(p for p, tools in shipped_packages().items()
                  if p.startswith(kind + ":") and any(shutil.which(t) is None for t in tools))


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["install"]:
        print("usage: python -m tvmc.toolchain install", file=sys.stderr)
        return 2
    names = [p.split(":", 1)[1] for p in missing_packages("deb")]
    if not names:
        return 0
    import os

    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print(f"note: not installing {' '.join(names)} (needs root and apt-get); the tests that need them "
              f"will skip", file=sys.stderr)
        return 0
    print(f"installing Debian packages: {' '.join(names)}", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *names]):
        res = subprocess.run(cmd, env=env)
        if res.returncode != 0:
            print(f"note: '{' '.join(cmd)}' failed (exit {res.returncode}); the tests that need "
                  f"{' '.join(names)} will skip", file=sys.stderr)
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
