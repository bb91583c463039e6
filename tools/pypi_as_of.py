"""The release of each package that was current on PyPI at a date: how a snapshot of an older image is reconstructed
when no `pip freeze` of it survives (kaggle-image/numpy1-2025.txt).

    python tools/pypi_as_of.py DATE NAME [NAME ...]     # e.g. 2025-05-01 rich nltk lxml

Prints `name==version` per package: the newest final release with a wheel for this Python on Linux x86_64 (or a
pure-Python one) uploaded before DATE. Reads PyPI's JSON API (needs the internet; never run by the chain or tests).
"""

from __future__ import annotations

import json
import sys
import urllib.request

from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

SUPPORTED = {str(t) for t in sys_tags()}


def fits(filename: str) -> bool:
    """Does this wheel install on this interpreter (the twin's: same Python, Linux x86_64)?"""
    try:
        tags = parse_wheel_filename(filename)[3]
    except ValueError:
        return False
    return any(str(t) in SUPPORTED for t in tags)


def as_of(name: str, date: str) -> str:
    with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=60) as response:
        releases = json.load(response)["releases"]
    best = None
    for raw, files in releases.items():
        try:
            version = Version(raw)
        except InvalidVersion:
            continue
        wheels = [f for f in files if f["filename"].endswith(".whl") and not f.get("yanked") and fits(f["filename"])]
        if version.is_prerelease or not wheels or min(f["upload_time"] for f in wheels)[:10] >= date:
            continue
        best = max(best, version) if best else version
    if best is None:
        raise SystemExit(f"{name}: no release with a wheel for this Python before {date}")
    return f"{name}=={best}"


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    for package in sys.argv[2:]:
        print(as_of(package, sys.argv[1]), flush=True)
