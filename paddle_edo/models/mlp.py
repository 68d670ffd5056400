"""The multilayer perceptron head the reference models share."""
from __future__ import annotations

from typing import Sequence

import paddle.nn as nn


def mlp(in_features: int, hidden_units: Sequence[int], dropout: float = 0.0, out_features: int = 1) -> nn.Sequential:
    """Linear + ReLU (+ Dropout) per hidden layer, then a linear output layer."""
    layers: list[nn.Layer] = []
    width = in_features
    for units in hidden_units:
        layers += [nn.Linear(width, units), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = units
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)
