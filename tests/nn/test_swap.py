import paddle
import pytest

from paddle_edo.errors import EdoValueError
from paddle_edo.nn import DenseEmbedding
from paddle_edo.nn.swap import swap_named, swap_sublayers


class _Model(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.tables = paddle.nn.LayerDict({"user": DenseEmbedding(10, 4), "item": DenseEmbedding(20, 4)})
        self.head = paddle.nn.Linear(4, 1)


def test_swap_named_replaces_by_path_and_puts_back():
    model = _Model()
    user, item = model.tables["user"], model.tables["item"]
    new = DenseEmbedding(10, 4)
    originals = swap_named(model, {"tables.user": new})
    assert originals == {"tables.user": user}
    assert dict(model.named_sublayers())["tables.user"] is new and model.tables["item"] is item
    swap_named(model, originals)
    assert model.tables["user"] is user


def test_swap_named_agrees_with_swap_sublayers():
    first, second = _Model(), _Model()
    new = DenseEmbedding(20, 4)
    swap_named(first, {"tables.item": new})
    swap_sublayers(second, lambda name, layer: new if name == "tables.item" else None)
    assert dict(first.named_sublayers())["tables.item"] is dict(second.named_sublayers())["tables.item"] is new


@pytest.mark.parametrize("name", ["tables.age", "towers.user", "head.weight"])
def test_swap_named_refuses_a_name_the_model_lacks_and_changes_nothing(name):
    model = _Model()
    before = dict(model.named_sublayers())
    with pytest.raises(EdoValueError, match=f"no sublayer '{name}'"):
        swap_named(model, {"tables.user": DenseEmbedding(10, 4), name: DenseEmbedding(10, 4)})
    assert dict(model.named_sublayers()) == before
