import numpy as np
import paddle

from paddle_edo.models.optimizers import create_optimizer
from paddle_edo.nn import DenseEmbedding


def test_lazy_adam_leaves_rows_outside_the_batch_untouched(synthetic_config):
    config = synthetic_config()
    layer = DenseEmbedding(20, 4)
    optimizer = create_optimizer(config["train"], layer)
    for ids in ([1, 2], [3]):  # after the first step rows 1, 2 have non-zero moments
        before = layer.weight.numpy().copy()
        layer(paddle.to_tensor(ids)).sum().backward()
        optimizer.step()
        optimizer.clear_grad()
        changed = np.flatnonzero((layer.weight.numpy() != before).any(1)).tolist()
        assert changed == ids


def test_embedding_learning_rate_scales_only_the_tables(synthetic_config):
    config = synthetic_config(optimizer="sgd", learning_rate=0.1, embedding_learning_rate=0.05)
    model = paddle.nn.Sequential(DenseEmbedding(5, 2), paddle.nn.Linear(2, 1))
    optimizer = create_optimizer(config["train"], model)
    table, linear = model[0].weight, model[1].weight
    assert table.optimize_attr["learning_rate"] == 0.5 and linear.optimize_attr["learning_rate"] == 1.0
    w0 = table.numpy().copy()
    model[1](model[0](paddle.to_tensor([1]))).sum().backward()
    grad = np.zeros_like(w0)
    grad[1] = (model[1].weight.numpy().ravel())
    optimizer.step()
    # atol: where the step nearly cancels the row, float32 rounding of operands ~1e-2 is ~1e-9 (a wrong
    # learning rate moves the rows by ~1e-3)
    np.testing.assert_allclose(table.numpy(), w0 - 0.05 * grad, rtol=1e-6, atol=1e-8)
