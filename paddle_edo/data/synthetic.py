"""Synthetic CTR data: Zipf-distributed ids per field and a planted label rule a model can learn."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .ctr import CTRTable, FieldSpec


def zipf_ids(num_rows: int, size: int | tuple[int, ...], alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Ranks in [0, num_rows) drawn with P(rank r) proportional to (r + 1) ** -alpha (finite support)."""
    cdf = np.cumsum(np.arange(1, num_rows + 1, dtype=np.float64) ** -alpha)
    return np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right").astype(np.int64)


def make_synthetic_ctr(num_samples: int = 200_000, num_fields: int = 8, rows_per_field: int = 100_000,
                       zipf_alpha: float = 1.05, seed: int = 7, return_logit: bool = False
                       ) -> CTRTable | tuple[CTRTable, np.ndarray]:
    """Ids of each field follow Zipf(alpha) over a random permutation of 1..rows_per_field-1.

    The label is Bernoulli(sigmoid(logit)) where the logit sums a hidden weight per id and a hidden
    interaction between fields 0 and 1 (dot product of 4-dim hidden vectors): first- and
    second-order structure that a factorisation model can recover. ``return_logit`` also returns
    the planted logit, whose AUC is the best any model can reach.
    """
    rng = np.random.default_rng(seed)
    vocab = rows_per_field
    fields = [FieldSpec(f"f{i}", vocab) for i in range(num_fields)]
    ids, logit = {}, np.zeros(num_samples)
    hidden_vectors = []
    for field in fields:
        permutation = rng.permutation(vocab - 1) + 1  # the hottest ids are not simply the smallest
        column = permutation[zipf_ids(vocab - 1, num_samples, zipf_alpha, rng)]
        weights = rng.normal(0.0, 0.8, vocab)
        ids[field.name] = column
        logit += weights[column]
        hidden_vectors.append(rng.normal(0.0, 0.7, (vocab, 4)))
    if num_fields >= 2:
        logit += np.einsum("nd,nd->n", hidden_vectors[0][ids["f0"]], hidden_vectors[1][ids["f1"]])
    logit -= np.median(logit)  # about half the samples positive
    labels = (rng.random(num_samples) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    table = CTRTable(fields, ids, labels)
    return (table, logit) if return_logit else table


CITIES = ("北京", "上海", "广州", "深圳", "杭州", "成都", "武汉", "西安", "南京", "重庆")
DEVICES = ("ios", "android", "web")
TAGS = ("体育", "音乐", "科技", "美食", "旅行", "游戏", "电影", "读书")


def make_raw_clicks(num_samples: int = 20_000, num_users: int = 2_000, seed: int = 11) -> pa.Table:
    """A small click log as users' files hold it: string ids (``user``, ``city``, ``device``), a
    multi-valued ``tags`` cell (``体育|科技``), numbers (``price``, ``age``, ``hour``), empty cells, and a
    0/1 ``click`` planted from the user, city x device, tags, price and age."""
    rng = np.random.default_rng(seed)
    user_rank = zipf_ids(num_users, num_samples, 1.05, rng)
    user_weight = rng.normal(0.0, 0.8, num_users)
    city = rng.integers(0, len(CITIES), num_samples)
    device = rng.integers(0, len(DEVICES), num_samples)
    pair_weight = rng.normal(0.0, 0.6, (len(CITIES), len(DEVICES)))
    tag_weight = np.array([0.2, 0.1, 0.9, 0.3, 0.2, -0.9, 0.0, -0.3])
    tag_sets = [rng.choice(len(TAGS), size=k, replace=False) for k in rng.integers(0, 4, num_samples)]
    price = np.round(np.exp(rng.normal(3.0, 1.0, num_samples)), 2)
    age = rng.integers(18, 71, num_samples)
    hour = rng.integers(0, 24, num_samples)
    logit = (user_weight[user_rank] + pair_weight[city, device] + np.array([tag_weight[t].sum() for t in tag_sets])
             - 0.5 * (np.log(price) - 3.0) + 0.02 * (age - 40) - 0.2)
    clicks = (rng.random(num_samples) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    missing = {name: rng.random(num_samples) < share for name, share in
               (("city", 0.05), ("device", 0.05), ("price", 0.1), ("age", 0.08))}
    return pa.table({
        "click": pa.array(clicks),
        "user": pa.array([f"u{r:05d}" for r in user_rank]),
        "city": pa.array([CITIES[c] for c in city], mask=missing["city"]),
        "device": pa.array([DEVICES[d] for d in device], mask=missing["device"]),
        "tags": pa.array(["|".join(TAGS[t] for t in tags) for tags in tag_sets]),
        "price": pa.array(price, mask=missing["price"]),
        "age": pa.array(age, mask=missing["age"]),
        "hour": pa.array(hour),
    })
