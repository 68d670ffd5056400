"""Every model of paddle_edo.models as users convert it: paddle.jit.to_static with its defaults (SOT) trains
as dynamic graph does, full_graph=True serves the same outputs, and jit.save serves in Paddle Inference."""
import numpy as np
import paddle
import pytest

from paddle_edo.data import FieldSpec
from paddle_edo.export import Predictor, export_model, input_specs
from paddle_edo.models import ClickAndRating, DeepFM, TextClassifier

CTR_FIELDS = [FieldSpec("user", 300), FieldSpec("item", 500), FieldSpec("genres", 20, max_len=3)]
TEXT_FIELDS = [FieldSpec("words", 200, max_len=6), FieldSpec("chars", 80, max_len=6 * 3)]
EMBEDDING = {"type": "quantized", "storage_format": "int8", "mode": "qat", "dim": 8, "sparse": True, "init_std": 0.1}

MODELS = {
    "deepfm": (lambda: DeepFM(CTR_FIELDS, EMBEDDING, hidden_units=[16, 8]), CTR_FIELDS),
    "click_and_rating": (lambda: ClickAndRating(CTR_FIELDS, {"type": "dense", "dim": 8, "sparse": True}, [16]),
                         CTR_FIELDS),
    "text_classifier": (lambda: TextClassifier(TEXT_FIELDS, {"type": "dense", "dim": 8, "sparse": True}, "gate",
                                               [16]), TEXT_FIELDS),
    **{f"text_classifier_{encoder}": (lambda encoder=encoder: TextClassifier(
        TEXT_FIELDS, {"type": "dense", "dim": 8, "sparse": True}, "gate", [16], encoder=encoder, channels=4), TEXT_FIELDS)
       for encoder in ("cnn", "bigru")},
}


def batch(fields, seed):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(0, f.vocab_size, (32, f.max_len) if f.multi_valued else 32).astype(np.int64) for f in fields]
    ids[-1][:4, 1:] = 0  # padded bags
    return [paddle.to_tensor(i) for i in ids]


def loss_of(outputs, labels):
    logit = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
    return paddle.nn.functional.binary_cross_entropy_with_logits(logit, labels)


def twins(name):
    make, fields = MODELS[name]
    paddle.seed(4)
    model = make()
    paddle.seed(4)
    twin = make()
    twin.set_state_dict(model.state_dict())
    return model, twin, fields


@pytest.mark.parametrize("name", list(MODELS))
def test_a_model_under_default_to_static_trains_as_in_dynamic_graph(name):
    model, twin, fields = twins(name)
    static = paddle.jit.to_static(model)  # every default: SOT, no input_spec
    labels = paddle.to_tensor(np.random.default_rng(0).integers(0, 2, 32).astype(np.float32))
    losses = {}
    for key, net, run in (("static", model, static), ("dygraph", twin, twin)):
        net.train()
        optimizer = paddle.optimizer.Adam(0.01, parameters=net.parameters(), lazy_mode=True)
        losses[key] = []
        for step in range(3):
            loss = loss_of(run(batch(fields, step)), labels)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
            losses[key].append(float(loss))
    np.testing.assert_allclose(losses["static"], losses["dygraph"], rtol=1e-6)
    assert losses["static"][-1] != losses["static"][0]  # it trained


@pytest.mark.parametrize("name", list(MODELS))
def test_a_model_serves_the_same_under_full_graph_and_in_paddle_inference(tmp_path, name):
    model, twin, fields = twins(name)
    model.eval(), twin.eval()
    ids = batch(fields, 5)
    with paddle.no_grad():
        expected = twin(ids)
        expected = (expected[0] if isinstance(expected, tuple) else expected).numpy()
        static = paddle.jit.to_static(model, input_spec=[input_specs(fields)], full_graph=True)(ids)
        static = static[0] if isinstance(static, tuple) else static
    np.testing.assert_allclose(static.numpy(), expected, rtol=1e-6, atol=1e-6)
    prefix = export_model(twin, input_specs(fields), tmp_path / "model")
    served = Predictor(prefix, device="cpu").run([i.numpy() for i in ids])
    np.testing.assert_allclose(served, expected, rtol=1e-6, atol=1e-6)
