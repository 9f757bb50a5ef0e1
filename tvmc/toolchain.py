"""External tools a target needs (linker, emulator, browser): found on PATH, or a one-line error
naming the package that provides them. The tools and their packages are data in the target
descriptors (`linker`/`linker_package`, `tools` (what the linker uses: {program or file:
package}), `emulator`/`emulator_package`, `browser`/`browser_package`).

`python -m tvmc.toolchain install` (run by `make install`) installs the Debian packages the
shipped descriptors name that are missing, where apt-get can run (root); elsewhere it prints
which ones are missing and exits 0, and the tests that need them skip naming them.
"""

from __future__ import annotations

import os
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


def locate(tool: str) -> str | None:
    """Full path of `tool`: an absolute path that exists, else a program found on PATH; None."""
    if os.path.isabs(tool):
        return tool if os.path.exists(tool) else None
    return shutil.which(tool)


def find_tool(command, package: str, what: str, error_cls) -> str:
    """Full path of `command[0]` (a program on PATH or an absolute file path); raises `error_cls`
    ("<what> '<tool>' not found; install <package>") when it is missing."""
    path = locate(command[0])
    if path is None:
        hint = f"; install {describe_package(package)}" if package else ""
        raise error_cls(f"{what} '{command[0]}' not found{hint}")
    return path


def find_linker_tools(target, error_cls) -> None:
    """Check that every program and file of the descriptor's `tools` exists; raises `error_cls`
    naming the first missing one and its package."""
    for tool, package in target.tools:
        find_tool([tool], package, f"target {target.name}: the linker's", error_cls)


def shipped_packages() -> dict:
    """{package: [tool, ...]} of every linker, linker tool, emulator and browser the shipped
    descriptors name."""
    from tvmc.target import NATIVE, known_targets, resolve_target

    out: dict = {}
    for name in known_targets():
        if name == NATIVE:
            continue
        t = resolve_target(name)
        named = [(t.linker[:1], t.linker_package), (t.emulator[:1], t.emulator_package),
                 (t.browser[:1], t.browser_package)] + [((tool,), package) for tool, package in t.tools]
        for tool, package in named:
            if tool and package:
                out.setdefault(package, [])
                if tool[0] not in out[package]:
                    out[package].append(tool[0])
    return out


def missing_packages(kind: str = "deb") -> list:
    """Packages of `kind` (deb, pypi) whose tools are not on PATH."""
    return sorted(p for p, tools in shipped_packages().items()
                  if p.startswith(kind + ":") and any(locate(t) is None for t in tools))


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["install"]:
        print("usage: python -m tvmc.toolchain install", file=sys.stderr)
        return 2
    names = [p.split(":", 1)[1] for p in missing_packages("deb")]
    if not names:
        return 0
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
