"""A PEP 517 build backend in the standard library alone (zipfile, tarfile,
tomllib), so that ``pip install ./sdk/python`` works offline: with build
isolation pip installs the backend's requirements first, and this backend
has none.

It builds a pure-Python wheel of the packages named in pyproject.toml's
``[tool.cairn-build]`` (and an sdist, and an editable wheel that points at
the source tree). It knows only what this project needs: ``[project]``'s
name, version, description, readme, requires-python and dependencies.
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
WHEEL_TAG = "py3-none-any"
# Fixed timestamps make the archives reproducible.
ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def _project() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _names() -> tuple[str, str]:
    """The distribution's name as file names spell it, and its version."""
    p = _project()["project"]
    return re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"]


def _metadata() -> str:
    p = _project()["project"]
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    readme = p.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        body = (ROOT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n\n" + body


def _package_files() -> list[tuple[str, bytes]]:
    """(archive name, content) of every file of the packages, sorted."""
    files = []
    for pkg in _project()["tool"]["cairn-build"]["packages"]:
        for path in sorted((ROOT / pkg).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append((path.relative_to(ROOT).as_posix(), path.read_bytes()))
    return files


def _dist_info(name: str, version: str, tag: str) -> list[tuple[str, bytes]]:
    info = f"{name}-{version}.dist-info"
    wheel = f"Wheel-Version: 1.0\nGenerator: cairn_build\nRoot-Is-Purelib: true\nTag: {tag}\n"
    return [(f"{info}/METADATA", _metadata().encode("utf-8")),
            (f"{info}/WHEEL", wheel.encode("utf-8"))]


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _write_wheel(directory: str, files: list[tuple[str, bytes]]) -> str:
    name, version = _names()
    files = files + _dist_info(name, version, WHEEL_TAG)
    record = f"{name}-{version}.dist-info/RECORD"
    lines = [_record_line(a, d) for a, d in files] + [f"{record},,"]
    files.append((record, ("\n".join(lines) + "\n").encode("utf-8")))
    filename = f"{name}-{version}-{WHEEL_TAG}.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return filename


# ----------------------------------------------------------- PEP 517 hooks

def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> list[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[dict] = None) -> str:
    name, version = _names()
    for arcname, data in _dist_info(name, version, WHEEL_TAG):
        path = Path(metadata_directory) / arcname
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return f"{name}-{version}.dist-info"


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """A wheel holding only a .pth file that puts the source tree on sys.path."""
    name, _ = _names()
    return _write_wheel(wheel_directory, [(f"__editable__.{name}.pth",
                                           (str(ROOT) + "\n").encode("utf-8"))])


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    name, version = _names()
    top = f"{name}-{version}"
    conf = _project()["tool"]["cairn-build"]
    paths: list[Path] = []
    for entry in conf["packages"] + conf["sdist-extra"]:
        p = ROOT / entry
        paths += sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    filename = f"{top}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{top}/{arcname}")
            info.size, info.mtime, info.mode = len(data), int(time.mktime((2020, 1, 1, 0, 0, 0, 0, 0, 0))), 0o644
            t.addfile(info, io.BytesIO(data))
        for p in paths:
            if "__pycache__" in p.parts or p.suffix == ".pyc":
                continue
            add(p.relative_to(ROOT).as_posix(), p.read_bytes())
        add("PKG-INFO", _metadata().encode("utf-8"))
    return filename
