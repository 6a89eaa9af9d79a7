"""Compare what is installed in an environment with the lock files (tools/lock/*.txt), and optionally sync.

    python tools/lock_check.py [--exact] [--sync] [--python PATH] LOCK [LOCK ...]

Every package pinned in the locks must be installed at its locked version. With ``--exact`` nothing else may
be installed either (``pip freeze --all`` equals the union of the locks, the project itself aside); with
``--sync`` packages that no lock names are uninstalled first, so that an old venv converges on the lock.
Exit 0 with one line when the environment matches, 1 with one line per difference otherwise.

Standard library only: it runs in the image's build stage and before anything else is installed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

PROJECT = "rocksidecar"  # the project itself: installed from the tree, not from a lock
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def canonical(name: str) -> str:
    """PEP 503 normalisation: `aws-cdk.Lambda_Layer` and `aws-cdk-lambda-layer` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_locks(paths: list[Path]) -> dict[str, str]:
    """name -> version over all locks; one package locked at two versions is an error."""
    pins: dict[str, str] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            match = _PIN.match(line)
            if match is None:
                continue
            name, version = canonical(match[1]), match[2]
            if pins.get(name, version) != version:
                raise SystemExit(f"lock_check: {name} is locked at {pins[name]} and at {version} ({path})")
            pins[name] = version
    return pins


def installed(python: str) -> dict[str, str]:
    """name -> version of every distribution in `python`'s environment, pip, setuptools and wheel too."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "freeze", "--all", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        match = _PIN.match(line)
        if match is not None:
            found[canonical(match[1])] = match[2]
    return found


def differences(pins: dict[str, str], found: dict[str, str], *, exact: bool) -> list[str]:
    lines = []
    for name, version in sorted(pins.items()):
        have = found.get(name)
        if have is None:
            lines.append(f"missing: {name}=={version}")
        elif have != version:
            lines.append(f"wrong version: {name}=={have}, the lock says {version}")
    if exact:
        lines += [f"not in the lock: {name}=={found[name]}" for name in sorted(set(found) - set(pins))]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("locks", nargs="+", type=Path)
    parser.add_argument(
        "--exact", action="store_true", help="nothing but the locked packages may be installed"
    )
    parser.add_argument("--sync", action="store_true", help="uninstall packages that no lock names")
    parser.add_argument("--python", default=sys.executable, help="the environment's interpreter")
    args = parser.parse_args(argv)
    pins = read_locks(args.locks)
    found = installed(args.python)
    found.pop(PROJECT, None)
    extra = sorted(set(found) - set(pins))
    if args.sync and extra:
        subprocess.run(
            [sys.executable, "-m", "pip", "--python", args.python, "uninstall", "-q", "-y", *extra],
            check=True,
        )
        found = {name: version for name, version in found.items() if name not in extra}
    problems = differences(pins, found, exact=args.exact or args.sync)
    names = " + ".join(str(path) for path in args.locks)
    if problems:
        for line in problems:
            print(f"lock_check: {line}", file=sys.stderr)
        print(f"lock_check: the environment of {args.python} does not match {names}", file=sys.stderr)
        return 1
    print(f"lock_check: {len(pins)} packages installed exactly as {names} lock them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
