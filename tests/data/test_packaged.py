import zipfile

import pytest

from paddle_edo.data import DataError, fetch
from paddle_edo.data.packaged import PACKAGED


def make_wheel(path, files):
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def test_unpacks_only_the_data_folder_from_a_package_file(tmp_path):
    member = PACKAGED["movielens"].member
    wheel = make_wheel(tmp_path / "recbole-1.2.1-py3-none-any.whl", {
        member + "ml-100k.inter": "user_id:token\n", member + "ml-100k.user": "u\n",
        member + "ml-100k.item": "i\n", member + "ml-100k.kg": "not wanted\n", "recbole/__init__.py": ""})
    folder = fetch("movielens", tmp_path / "cache", package_file=wheel)
    assert sorted(p.name for p in folder.iterdir()) == ["ml-100k.inter", "ml-100k.item", "ml-100k.user"]
    assert (folder / "ml-100k.inter").read_text() == "user_id:token\n"
    assert fetch("movielens", tmp_path / "cache") == folder  # cached: no second download


def test_a_package_file_without_the_data_is_refused_and_leaves_nothing(tmp_path):
    wheel = make_wheel(tmp_path / "recbole-1.2.1-py3-none-any.whl", {"recbole/__init__.py": ""})
    with pytest.raises(DataError, match="has no recbole/dataset_example/ml-100k/ml-100k.inter"):
        fetch("movielens", tmp_path / "cache", package_file=wheel)
    assert list((tmp_path / "cache").iterdir()) == []


def test_unreachable_registry_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_NO_INDEX", "")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(DataError) as info:
        fetch("movielens", tmp_path / "cache")
    message = str(info.value)
    assert "could not download recbole==1.2.1" in message and "--package-file" in message
    assert list((tmp_path / "cache").iterdir()) == []


def test_unknown_data_set():
    with pytest.raises(DataError, match="unknown packaged data 'imagenet'"):
        fetch("imagenet")
