"""Token vocabularies: built from a corpus, saved as one token per line, with [PAD] = 0 and [UNK] = 1."""
from __future__ import annotations

import collections
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import EdoValueError

#: The tokens of ids 0 (padding) and 1 (every unknown token) of a Vocab.
PAD, UNK = "[PAD]", "[UNK]"


class VocabError(EdoValueError):
    """A vocabulary file or argument that cannot be used; the message names the line or argument."""


class Vocab:
    """Tokens and their ids; id 0 is ``[PAD]`` and id 1 ``[UNK]``, which unknown tokens map to."""

    def __init__(self, tokens: Sequence[str], source: str = "Vocab") -> None:
        tokens = list(tokens)
        seen: dict[str, int] = {}
        for line, token in enumerate(tokens, 1):
            if token in seen:
                raise VocabError(f"{source}: line {line}: token {token!r} repeats line {seen[token]}")
            if not token or any(c in token for c in "\r\n"):
                raise VocabError(f"{source}: line {line}: {token!r} is not a token (empty or with a line break)")
            seen[token] = line
        for token, expected_id in ((PAD, 0), (UNK, 1)):
            if seen.get(token) != expected_id + 1:
                where = f"it is on line {seen[token]}" if token in seen else "it is missing"
                raise VocabError(f"{source}: {token} must be on line {expected_id + 1} (id {expected_id}); {where}")
        self.tokens = tokens
        self.index = {token: i for i, token in enumerate(tokens)}

    pad_id, unk_id = 0, 1

    @classmethod
    def build(cls, corpus: Iterable[Iterable[str]], min_freq: int = 1, max_size: int | None = None,
              specials: Sequence[str] = ()) -> "Vocab":
        """From tokenised sentences: tokens seen at least ``min_freq`` times, most frequent first (ties in
        order of first appearance), at most ``max_size`` ids in all, after [PAD], [UNK] and ``specials``."""
        if min_freq < 1:
            raise VocabError(f"Vocab.build: min_freq = {min_freq} must be >= 1")
        head = [PAD, UNK, *[s for s in specials if s not in (PAD, UNK)]]
        if max_size is not None and max_size < len(head):
            raise VocabError(f"Vocab.build: max_size = {max_size} must leave room for {head}")
        counts = collections.Counter(token for sentence in corpus for token in sentence)
        ranked = [t for t, n in sorted(counts.items(), key=lambda kv: -kv[1]) if n >= min_freq and t not in head]
        if max_size is not None:
            ranked = ranked[: max_size - len(head)]
        return cls(head + ranked, source="Vocab.build")

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        """One token per line, as ``save`` writes (UTF-8; a trailing newline is fine)."""
        text = Path(path).read_text(encoding="utf-8")
        return cls(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), source=str(path))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{t}\n" for t in self.tokens), encoding="utf-8")
        return path

    @classmethod
    def from_paddlenlp(cls, vocab: Any) -> "Vocab":
        """A ``paddlenlp.data.Vocab``, re-indexed so that its pad token is id 0 and its unk token id 1."""
        to_index = vocab.token_to_idx
        pad = getattr(vocab, "pad_token", None) or PAD
        unk = getattr(vocab, "unk_token", None) or UNK
        rest = [t for t, _ in sorted(to_index.items(), key=lambda kv: kv[1]) if t not in (pad, unk)]
        return cls([PAD, UNK, *rest], source="paddlenlp Vocab")

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.index

    def id(self, token: str) -> int:
        return self.index.get(token, self.unk_id)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        get = self.index.get
        return [get(t, 1) for t in tokens]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.tokens == other.tokens
