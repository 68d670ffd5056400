import numpy as np
import paddle
import pytest

from paddle_edo.errors import EdoValueError
from paddle_edo.nn import CharWordEmbedding
from paddle_edo.text import (CharComposer, Vocab, fit_composer, load_composed_chars, neighbour_overlap,
                             plain_char_mean)
from paddle_edo.text.compose import cosine

CHARS = [chr(0x4E00 + i) for i in range(40)]
DIM = 16


def planted(positional: bool, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Words of 2-3 characters whose vectors are made from their characters' (plus noise): the mean of
    the character vectors, or the mean of one fixed rotation for the first, middle and last characters;
    single characters are tokens too, with their own vectors, only in the plain case."""
    rng = np.random.default_rng(seed)
    char_vectors = {c: rng.normal(size=DIM) for c in CHARS}
    maps = [np.linalg.qr(rng.normal(size=(DIM, DIM)))[0] for _ in range(3)]
    words = sorted({"".join(rng.choice(CHARS, size=rng.integers(2, 4))) for _ in range(900)})
    vectors = []
    for word in words:
        slots = [0, *[1] * (len(word) - 2), 2]
        parts = [char_vectors[c] @ (maps[slot] if positional else np.eye(DIM)) for slot, c in zip(slots, word)]
        vectors.append(np.mean(parts, axis=0) + 0.05 * rng.normal(size=DIM))
    tokens = words + ([] if positional else CHARS)
    vectors += [] if positional else [char_vectors[c] for c in CHARS]
    return tokens, np.array(vectors, dtype=np.float32)


def held_out_cosine(kind: str, tokens: list[str], vectors: np.ndarray) -> float:
    hidden = np.arange(0, 600, 10)
    known = np.setdiff1d(np.arange(len(tokens)), hidden)
    fit = fit_composer([tokens[i] for i in known], vectors[known], kind, epochs=60, char_dropout=0.0)
    assert fit.train_words == len(known)
    return float(cosine(vectors[hidden], fit.composer.compose_vectors([tokens[i] for i in hidden]).vectors).mean())


def test_a_mean_composition_is_recovered_for_held_out_words():
    tokens, vectors = planted(positional=False)
    assert held_out_cosine("mean", tokens, vectors) > 0.97
    hidden = [t for t in tokens if len(t) > 1][:50]
    plain = plain_char_mean(hidden, CHARS, vectors[-len(CHARS):])
    assert not plain.no_known_char.any()
    assert cosine(vectors[:50], plain.vectors).mean() > 0.97   # here the plain mean is right too


def test_only_the_position_composer_learns_characters_that_mean_different_things_by_position():
    tokens, vectors = planted(positional=True)
    position, mean = held_out_cosine("position", tokens, vectors), held_out_cosine("mean", tokens, vectors)
    assert position > 0.9 and position > mean + 0.2
    assert held_out_cosine("mlp", tokens, vectors) > mean
    plain = plain_char_mean(tokens[:5], tokens, vectors)           # no character is a token: all flagged
    assert plain.no_known_char.all() and not plain.vectors.any()


def test_words_without_a_known_character_get_the_unknown_characters_vector_flagged():
    tokens, vectors = planted(positional=False)
    composer = fit_composer(tokens, vectors, "mlp", epochs=2).composer
    composed = composer.compose_vectors(["丁丂", "😀😀", "", "丁😀"])
    assert composed.flagged == ["😀😀", ""]
    assert np.isfinite(composed.vectors).all() and composed.vectors.shape == (4, DIM)
    np.testing.assert_allclose(composed.vectors[1], composed.vectors[2], atol=1e-6)  # both the [UNK] character
    assert composer.compose_vectors([]).vectors.shape == (0, DIM)


def test_a_char_word_embedding_started_from_a_mean_composer_gives_unknown_words_its_vectors():
    tokens, vectors = planted(positional=False)
    composer = fit_composer(tokens, vectors, "mean", epochs=5).composer
    chars = Vocab(["[PAD]", "[UNK]", *CHARS[::-1]])
    layer = CharWordEmbedding(10, DIM, "gate", num_chars=len(chars))
    report = load_composed_chars(layer.chars.weight, chars, composer)
    assert report.hits == len(CHARS) and report.misses == 0
    words = ["丁丂", "七丈三"]
    char_ids = np.zeros((1, 2, 4), dtype=np.int64)
    for i, word in enumerate(words):
        char_ids[0, i, : len(word)] = chars.ids(word)
    layer.eval()
    out = layer(paddle.to_tensor(np.ones((1, 2), dtype=np.int64)), paddle.to_tensor(char_ids))  # both [UNK]
    np.testing.assert_allclose(out.numpy()[0], composer.compose_vectors(words).vectors, rtol=1e-5, atol=1e-6)
    with pytest.raises(EdoValueError, match=r"load_composed_chars: the composer makes 16-dim vectors .* \[42, 8\]"):
        load_composed_chars(CharWordEmbedding(10, 8, num_chars=len(chars)).chars.weight, chars, composer)


def test_neighbour_overlap_counts_shared_nearest_rows():
    vocabulary = np.eye(12, dtype=np.float32)
    true = vocabulary[:2] + 0.01
    assert neighbour_overlap(true, true, vocabulary, k=3).tolist() == [1.0, 1.0]
    assert neighbour_overlap(true, -true, vocabulary, k=1).tolist() == [0.0, 0.0]


def test_bad_composer_input_names_the_problem():
    tokens, vectors = planted(positional=False)
    with pytest.raises(EdoValueError, match=rf"fit_composer: 3 tokens and vectors of shape \[{len(tokens)}, 16\]"):
        fit_composer(tokens[:3], vectors)
    bad = vectors.copy()
    bad[4, 2] = np.nan
    with pytest.raises(EdoValueError, match="NaN or infinite"):
        fit_composer(tokens, bad)
    with pytest.raises(EdoValueError, match="kind = 'attention'; expected one of 'mean', 'position', 'mlp'"):
        CharComposer(Vocab(["[PAD]", "[UNK]"]), DIM, "attention")
