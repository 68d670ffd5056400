import numpy as np
import paddle
import pytest

from paddle_edo import memory_report, quantize
from paddle_edo.export import Predictor, export_model, input_specs
from paddle_edo.data import FieldSpec
from paddle_edo.models import TextClassifier
from paddle_edo.nn import CharWordEmbedding, QuantizedEmbedding
from paddle_edo.nn.char_word import masked_mean

WORDS, CHARS, DIM = 50, 30, 8
# sentence 0: an in-vocabulary word (7), an unknown word (1) and padding; sentence 1: one unknown word
WORD_IDS = np.array([[7, 1, 0], [1, 0, 0]], dtype=np.int64)
CHAR_IDS = np.array([[[3, 4], [5, 6], [0, 0]], [[5, 0], [0, 0], [0, 0]]], dtype=np.int64)


def run(layer, word_ids=WORD_IDS, char_ids=CHAR_IDS):
    with paddle.no_grad():
        return layer(paddle.to_tensor(word_ids), paddle.to_tensor(char_ids)).numpy()


def char_means(layer):
    table = layer.chars.weight.numpy()
    return {"pair": (table[5] + table[6]) / 2, "single": table[5], "iv": (table[3] + table[4]) / 2}


@pytest.mark.parametrize("fusion", ["gate", "concat", "add", "mean", "char"])
def test_unknown_words_get_their_characters_and_never_the_unk_row(fusion):
    paddle.seed(0)
    layer = CharWordEmbedding(WORDS, DIM, num_chars=CHARS, fusion=fusion)
    before = run(layer)
    if layer.words is not None:
        with paddle.no_grad():
            layer.words.weight[1] = 100.0  # the [UNK] row
    after = run(layer)
    np.testing.assert_array_equal(after[0, 1], before[0, 1])
    np.testing.assert_array_equal(after[1, 0], before[1, 0])
    means = char_means(layer)
    if fusion in ("gate", "add", "mean", "char"):  # exactly the mean of the word's characters
        np.testing.assert_allclose(after[0, 1], means["pair"], rtol=1e-6)
        np.testing.assert_allclose(after[1, 0], means["single"], rtol=1e-6)


def test_known_words_fuse_both_tables():
    paddle.seed(0)
    words = {}
    for fusion in ("word", "add", "mean", "gate"):
        layer = CharWordEmbedding(WORDS, DIM, num_chars=CHARS, fusion=fusion)
        out = run(layer)
        c = char_means(layer)["iv"] if layer.chars is not None else None
        w = layer.words.weight.numpy()[7]
        if fusion == "word":
            np.testing.assert_array_equal(out[0, 0], w)
            np.testing.assert_array_equal(out[1, 0], layer.words.weight.numpy()[1])  # word-only: the [UNK] row
        elif fusion == "add":
            np.testing.assert_allclose(out[0, 0], w + c, rtol=1e-6)
        elif fusion == "mean":
            np.testing.assert_allclose(out[0, 0], (w + c) / 2, rtol=1e-6, atol=1e-7)
        else:
            gate = 1 / (1 + np.exp(-(np.concatenate([w, c]) @ layer.gate.weight.numpy() + layer.gate.bias.numpy())))
            np.testing.assert_allclose(out[0, 0], gate * w + (1 - gate) * c, rtol=1e-5, atol=1e-7)
        words[fusion] = layer
    assert words["word"].chars is None and words["gate"].words is not None  # one table only where one is used


@pytest.mark.parametrize("fusion", ["gate", "word", "char"])
def test_one_collection_lookup_of_both_tables_equals_each_tables_own(fusion):
    from paddle_edo.nn.collection import bind_table_optimizer
    from paddle_edo.optim import TableOptimizer
    layers = []
    for collection in (True, False):
        paddle.seed(4)
        layers.append(CharWordEmbedding(WORDS, DIM, fusion, num_chars=CHARS, table={"collection": collection}))
    batched, apart = layers
    assert batched.batched.keys() == [k for k in ("words", "chars") if getattr(batched, k) is not None]
    assert apart.batched is None and set(dict(batched.named_parameters())) == set(dict(apart.named_parameters()))
    np.testing.assert_allclose(run(batched), run(apart), rtol=1e-6, atol=1e-9)
    trained = bind_table_optimizer(batched, TableOptimizer("sgd", 0.5))  # the tables train in the backward
    assert {id(p) for p in trained} == {id(t.weight) for t in (batched.words, batched.chars) if t is not None}
    reference = paddle.optimizer.SGD(0.5, parameters=[t.weight for t in (apart.words, apart.chars) if t is not None])
    batched(paddle.to_tensor(WORD_IDS), paddle.to_tensor(CHAR_IDS)).sum().backward()
    apart(paddle.to_tensor(WORD_IDS), paddle.to_tensor(CHAR_IDS)).sum().backward()
    reference.step()
    for key in ("words", "chars"):
        if getattr(batched, key) is not None:  # (rows past the padding row: Paddle's sparse gradient trains it)
            np.testing.assert_allclose(getattr(batched, key).weight.numpy()[1:], getattr(apart, key).weight.numpy()[1:],
                                       rtol=1e-6, atol=1e-8)


def test_masked_mean_ignores_padding_and_gives_zero_for_none():
    vectors = paddle.to_tensor(np.arange(12, dtype=np.float32).reshape(1, 2, 3, 2))
    mask = paddle.to_tensor(np.array([[[True, True, False], [False, False, False]]]))
    out = masked_mean(vectors, mask).numpy()
    np.testing.assert_array_equal(out[0, 0], [1.0, 2.0])
    np.testing.assert_array_equal(out[0, 1], [0.0, 0.0])


def test_text_classifier_round_trips_through_export_and_quantization(tmp_path):
    paddle.seed(1)
    fields = [FieldSpec("words", WORDS, 3), FieldSpec("chars", CHARS, 6)]
    model = TextClassifier(fields, {"type": "dense", "dim": DIM}, fusion="gate", hidden_units=[8])
    model.eval()
    inputs = [WORD_IDS, CHAR_IDS.reshape(2, -1)]
    with paddle.no_grad():
        dygraph = model([paddle.to_tensor(x) for x in inputs]).numpy()
    prefix = export_model(model, input_specs(fields), tmp_path / "fp32")
    np.testing.assert_allclose(Predictor(prefix, device="cpu").run(inputs), dygraph, rtol=1e-5, atol=1e-6)

    fp32_bytes = memory_report(model).held_bytes
    model = TextClassifier(fields, {"type": "dense", "dim": DIM}, fusion="gate", hidden_units=[8])
    model.eval()
    quantize(model, "int8")
    assert isinstance(model.embedding.words, QuantizedEmbedding) and isinstance(model.embedding.chars,
                                                                                 QuantizedEmbedding)
    report = memory_report(model)
    assert report.tables[0].dtype == "int8" and report.held_bytes < fp32_bytes / 2
    with paddle.no_grad():
        quantized = model([paddle.to_tensor(x) for x in inputs]).numpy()
    prefix = export_model(model, input_specs(fields), tmp_path / "int8")
    np.testing.assert_allclose(Predictor(prefix, device="cpu").run(inputs), quantized, rtol=1e-5, atol=1e-6)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="fusion = 'sum'; expected one of 'gate', 'concat'"):
        CharWordEmbedding(WORDS, DIM, num_chars=CHARS, fusion="sum")
    with pytest.raises(ValueError, match="num_chars = 1 must be an integer >= 2"):
        CharWordEmbedding(WORDS, DIM, num_chars=1)
    with pytest.raises(IndexError, match="id 50 is out of range"):
        run(CharWordEmbedding(WORDS, DIM, num_chars=CHARS), word_ids=np.array([[50, 0, 0], [1, 0, 0]]))
