"""The contract between a model and every trainer (the dygraph engine, collective ranks, the
parameter-server program): its config keys, its inputs, its loss and its metrics, written once per
model, as PaddleRec's models give ``create_feeds`` / ``create_loss`` / ``create_metrics``."""
from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np
import paddle
import paddle.nn.functional as F

from ..data.ctr import FieldSpec
from ..errors import EdoValueError
from ..export import input_specs
from ..metrics import accuracy, auc, chance_auc, logloss
from ..schema import Option


class RecModel(paddle.nn.Layer):
    """A model over id fields and optional dense features: ``forward(inputs)`` takes one id tensor per
    field, in field order, then (when the data has numeric features) the dense features float32
    [B, len(dense_features)], and gives a click logit [B] (a multi-task model: the logit, then one
    output [B] per ``regression_targets``). ``inputs(batch)`` builds that list from a batch.

    Subclasses build their tables from a ``TableSpec`` and declare the ``model`` keys they read
    (``config_options``)."""

    config_options: ClassVar[dict[str, Any]] = {}
    regression_targets: ClassVar[tuple[str, ...]] = ()  # outputs after the click logit, each with an MSE term
    table_sections: ClassVar[bool] = False  # builds each table from its own section (embedding.tables) if given
    task_weights: dict[str, float] = {"click": 1.0}

    def __init__(self, fields: Sequence[FieldSpec], dense_features: Sequence[str] = ()) -> None:
        super().__init__()
        self.fields = list(fields)
        self.dense_features = list(dense_features)
        # read in forward: Paddle 3's SOT cannot simulate FieldSpec.multi_valued (a dataclass property)
        self.bag_fields = frozenset(f.name for f in self.fields if f.multi_valued)

    @classmethod
    def from_config(cls, fields: Sequence[FieldSpec], config: dict[str, Any],
                    frequencies: dict[str, Any] | None = None, dense_features: Sequence[str] = ()) -> "RecModel":
        """The model a validated config describes, for these fields (``frequencies``: id counts per field)
        and dense features (names of the numeric columns)."""
        raise NotImplementedError

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        """Refuse settings of other sections this model cannot work with (raise ConfigError)."""

    def input_specs(self) -> list[paddle.static.InputSpec]:
        """One int64 input per field: [batch], or [batch, max_len] for a multi-valued field; then the
        dense features float32 [batch, K] when there are any."""
        return input_specs(self.fields, len(self.dense_features))

    def inputs(self, batch: dict[str, Any]) -> list[Any]:
        """``forward``'s input list from a batch keyed by field name (and ``dense``)."""
        return [batch[f.name] for f in self.fields] + ([batch["dense"]] if self.dense_features else [])

    def table_fields(self) -> dict[str, str]:
        """Sublayer name of each table -> the field whose ids it looks up (for monitors and prefetching)."""
        raise NotImplementedError

    def create_loss(self, outputs: Any, batch: dict[str, paddle.Tensor]) -> paddle.Tensor:
        """BCE of the click logit against ``batch["label"]``; each regression output adds its MSE against
        ``batch[target]``, weighted by ``task_weights``."""
        logits = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        loss = F.binary_cross_entropy_with_logits(logits.astype("float32"), batch["label"])
        if not self.regression_targets:
            return loss
        loss = self.task_weights["click"] * loss
        for target, output in zip(self.regression_targets, outputs[1:]):
            error = F.mse_loss(output.astype("float32"), batch[target].astype("float32"))
            loss = loss + self.task_weights[target] * error
        return loss

    def create_metrics(self, labels: np.ndarray, probabilities: np.ndarray,
                       regressions: dict[str, np.ndarray] | None = None,
                       targets: dict[str, np.ndarray] | None = None) -> dict[str, float]:
        """AUC, logloss and accuracy of the click probabilities (and ``auc_chance``, the AUC scores that know
        nothing stay under: metrics.chance_auc); the RMSE of each regression target."""
        results = {"auc": auc(labels, probabilities), "logloss": logloss(labels, probabilities),
                   "accuracy": accuracy(labels, probabilities), "auc_chance": chance_auc(labels)}
        for target, values in (regressions or {}).items():
            results[f"{target}_rmse"] = float(np.sqrt(np.mean((values - targets[target]) ** 2)))
        return results


def refuse_dense_features(cls: type, dense_features: Sequence[str]) -> None:
    """For models that read ids only: a clear error when the data brings numeric features."""
    if dense_features:
        raise EdoValueError(f"{cls.__name__} reads id fields only; the data has dense features "
                            f"{list(dense_features)} (model.name: deepfm reads them, or make them categorical "
                            f"with data.files.numeric.<column>.transform: bucketize)")


MODEL_OPTIONS: dict[str, Option] = {
    "hidden_units": Option([256, 128], list, item_kind=int, low=1),
    "dropout": Option(0.0, float, low=0.0, high=0.95),
}
