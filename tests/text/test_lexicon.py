import pickle

import pytest

from paddle_edo.errors import EdoFileNotFoundError, EdoValueError
from paddle_edo.text import read_word_list


def test_pickled_and_text_word_lists_read_stripped_distinct_words(tmp_path):
    (tmp_path / "pos.pkl").write_bytes(pickle.dumps(["给力 ", "种草", "给力", " "]))
    assert read_word_list(tmp_path / "pos.pkl") == ["给力", "种草"]
    (tmp_path / "words.txt").write_text("# coined words\n坑爹 3 a\n\n拉胯\n坑爹\n", encoding="utf-8")
    assert read_word_list(tmp_path / "words.txt") == ["坑爹", "拉胯"]


def test_bad_lexicons_name_the_file_and_line(tmp_path):
    with pytest.raises(EdoFileNotFoundError, match="missing.txt does not exist"):
        read_word_list(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("# nothing\n\n", encoding="utf-8")
    with pytest.raises(EdoValueError, match="empty.txt holds no words"):
        read_word_list(tmp_path / "empty.txt")
    (tmp_path / "gbk.txt").write_bytes("给力\n".encode("utf-8") + "坑爹\n".encode("gbk"))
    with pytest.raises(EdoValueError, match="gbk.txt: line 2 is not UTF-8"):
        read_word_list(tmp_path / "gbk.txt")
    (tmp_path / "dict.pkl").write_bytes(pickle.dumps({"给力": 1}))
    with pytest.raises(EdoValueError, match="dict.pkl holds a dict; expected a list of strings"):
        read_word_list(tmp_path / "dict.pkl")
    (tmp_path / "mixed.pkl").write_bytes(pickle.dumps(["给力", 3]))
    with pytest.raises(EdoValueError, match="mixed.pkl: entry 1 is a int"):
        read_word_list(tmp_path / "mixed.pkl")


class Payload:
    def __reduce__(self):
        return (print, ("ran",))


def test_a_pickle_that_names_code_is_refused_without_running_it(tmp_path, capsys):
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps([Payload()]))
    with pytest.raises(EdoValueError, match=r"evil.pkl is not a pickled list of strings \(it refers to builtins.print"):
        read_word_list(tmp_path / "evil.pkl")
    assert "ran" not in capsys.readouterr().out
    (tmp_path / "cut.pkl").write_bytes(pickle.dumps(["给力", "种草"])[:-3])
    with pytest.raises(EdoValueError, match="cut.pkl is not a pickled list of strings"):
        read_word_list(tmp_path / "cut.pkl")
