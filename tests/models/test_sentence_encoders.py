"""The text classifier's sentence encoders against numpy references of what they compute."""
import numpy as np
import paddle
import pytest

from paddle_edo.errors import EdoValueError
from paddle_edo.models.text import SentenceEncoder


def inputs(seed=0, batch=4, words=7, dim=5):
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(batch, words, dim)).astype(np.float32)
    lengths = np.array([7, 3, 1, 0])[:batch]
    mask = np.arange(words)[None] < lengths[:, None]
    return vectors, mask


def test_cnn_is_a_convolution_over_consecutive_words_max_pooled_over_the_real_ones():
    vectors, mask = inputs()
    paddle.seed(0)
    encoder = SentenceEncoder("cnn", 5, channels=3)
    out = encoder(paddle.to_tensor(vectors), paddle.to_tensor(mask)).numpy()
    assert out.shape == (4, 3 * 3 + 5) and encoder.out_features == 14
    batch, words, dim = vectors.shape
    padded = np.concatenate([vectors, np.zeros((batch, 2, dim), np.float32)], axis=1)
    expected = []
    for width, conv in zip((1, 2, 3), encoder.convs):
        windows = np.concatenate([padded[:, i:i + words] for i in range(width)], axis=-1)
        feature = np.maximum(windows @ conv.weight.numpy() + conv.bias.numpy(), 0.0)
        expected.append(np.stack([feature[b, mask[b]].max(axis=0) if mask[b].any() else np.zeros(3, np.float32)
                                  for b in range(batch)]))
    counts = np.maximum(mask.sum(axis=1, keepdims=True), 1)
    expected.append((vectors * mask[..., None]).sum(axis=1) / counts)
    np.testing.assert_allclose(out, np.concatenate(expected, axis=1), rtol=1e-5, atol=1e-6)


def test_the_max_sends_each_channel_its_gradient_at_the_winning_word_only():
    vectors, mask = inputs(1)
    encoder = SentenceEncoder("cnn", 5, channels=3)
    x = paddle.to_tensor(vectors, stop_gradient=False)
    encoder(x, paddle.to_tensor(mask)).sum().backward()
    grad = x.grad.numpy()
    assert not grad[3].any()                             # no real word: nothing flows back
    # words past a sentence's end get nothing but from the windows (width 3) of its last real words
    assert not grad[1, 3 + 2:].any() and not grad[2, 1 + 2:].any()
    assert np.abs(grad[0]).sum() > 0


def test_bigru_reads_the_real_words_only_and_bad_settings_are_refused():
    vectors, mask = inputs(2)
    encoder = SentenceEncoder("bigru", 5, channels=4)
    out = encoder(paddle.to_tensor(vectors), paddle.to_tensor(mask)).numpy()
    assert out.shape == (4, 8) and not out[3].any()
    changed = vectors.copy()
    changed[1, 3:] = 9.0                                 # padding of the second sentence
    again = encoder(paddle.to_tensor(changed), paddle.to_tensor(mask)).numpy()
    np.testing.assert_allclose(again[1], out[1], rtol=1e-5, atol=1e-6)
    with pytest.raises(EdoValueError, match="kind = 'lstm'"):
        SentenceEncoder("lstm", 5)
    with pytest.raises(EdoValueError, match="channels = 0"):
        SentenceEncoder("cnn", 5, channels=0)
