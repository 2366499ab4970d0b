r"""Contextual stochastic block model (CSBM): the synthetic default graph that needs no files.

Deshpande et al. 2018, "Contextual Stochastic Block Models" (https://arxiv.org/abs/1807.09596), in the
edge-homophily parametrisation used by the heterophily literature. Everything is vectorised (numpy), so a
1,000,000-node graph takes a few seconds, and the output is a pure function of the arguments and ``seed``.

Generative process, for ``N`` nodes, ``C`` classes, average degree ``d``, edge homophily ``h``:

.. math::
    \pi_c \propto (1 - \iota)^c, \qquad |\{v : y_v = c\}| = \mathrm{round}(N \pi_c)

    M = \mathrm{round}(N d / 2) \text{ undirected edges, of which } \mathrm{round}(h M) \text{ intra-class}

    \text{intra: } u \sim \mathcal{U}(V),\ v \sim \mathcal{U}(V_{y_u} \setminus \{u\}); \qquad
    \text{inter: } u \sim \mathcal{U}(V),\ v \sim \mathcal{U}(V \setminus V_{y_u})

    x_v = \mu_{y_v} + \varepsilon_v, \quad \mu_c = s\, g_c,\ g_c \sim \mathcal{N}(0, I_F / 2),
    \quad \varepsilon_v \sim \mathcal{N}(0, I_F)

so that :math:`\mathbb{E}\|\mu_a - \mu_b\|^2 = s^2 F`: ``signal`` is the per-dimension separation of two
class means, measured in noise standard deviations. Duplicate pairs and self-loops are rejected and redrawn, so the
output has exactly ``M`` undirected edges when the graph is not too dense to allow it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch_geometric.data import Data

from securefgl.errors import ConfigError

__all__ = ["make_csbm", "check_csbm_params"]


def check_csbm_params(
    num_nodes: int,
    num_classes: int,
    avg_degree: float,
    homophily: float,
    num_features: int,
    signal: float,
    imbalance: float,
    seed: int,
) -> None:
    """Validate CSBM parameters; raise :class:`~securefgl.errors.ConfigError` naming the bad one."""
    for name, value in (
        ("num_nodes", num_nodes),
        ("num_classes", num_classes),
        ("num_features", num_features),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ConfigError(f"csbm.{name} must be an integer, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ConfigError(f"csbm.seed must be an integer, got {seed!r}")
    if num_classes < 2:
        raise ConfigError(f"csbm.num_classes must be at least 2, got {num_classes}")
    if num_nodes < 2 * num_classes:
        raise ConfigError(
            f"csbm.num_nodes must be at least 2 * num_classes = {2 * num_classes}, got {num_nodes}"
        )
    if num_features < 1:
        raise ConfigError(f"csbm.num_features must be at least 1, got {num_features}")
    if not (isinstance(avg_degree, int | float) and 0 <= avg_degree <= num_nodes / 4):
        raise ConfigError(
            f"csbm.avg_degree must be in [0, num_nodes / 4 = {num_nodes / 4}], got {avg_degree!r}"
        )
    if not (isinstance(homophily, int | float) and 0.0 <= homophily <= 1.0):
        raise ConfigError(f"csbm.homophily (edge homophily) must be in [0, 1], got {homophily!r}")
    if not (isinstance(signal, int | float) and signal >= 0 and math.isfinite(signal)):
        raise ConfigError(f"csbm.signal must be a finite number >= 0, got {signal!r}")
    if not (isinstance(imbalance, int | float) and 0.0 <= imbalance < 1.0):
        raise ConfigError(f"csbm.imbalance must be in [0, 1), got {imbalance!r}")


def _class_sizes(n: int, c: int, imbalance: float) -> np.ndarray:
    w = (1.0 - imbalance) ** np.arange(c, dtype=np.float64)
    p = w / w.sum()
    sizes = np.maximum(np.floor(p * n).astype(np.int64), 2)
    # distribute the remainder to the largest fractional parts (deterministic)
    diff = n - int(sizes.sum())
    if diff > 0:
        frac = p * n - np.floor(p * n)
        order = np.argsort(-frac, kind="stable")
        sizes[order[np.arange(diff) % c]] += 1
    while diff < 0:  # only possible after the max(., 2) floor: take from the largest classes
        i = int(np.argmax(sizes))
        sizes[i] -= 1
        diff += 1
    return sizes


def _draw(
    rng: np.random.Generator,
    count: int,
    intra: bool,
    y: np.ndarray,
    order: np.ndarray,
    start: np.ndarray,
    sizes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    n = y.shape[0]
    u = rng.integers(0, n, size=count, dtype=np.int64)
    cu = y[u]
    if intra:
        r = (rng.random(count) * sizes[cu]).astype(np.int64)
        v = order[start[cu] + r]
    else:
        r = (rng.random(count) * (n - sizes[cu])).astype(np.int64)
        r = np.where(r >= start[cu], r + sizes[cu], r)
        v = order[r]
    return u, v


def make_csbm(
    num_nodes: int = 3000,
    num_classes: int = 5,
    avg_degree: float = 10.0,
    homophily: float = 0.8,
    num_features: int = 64,
    signal: float = 1.0,
    imbalance: float = 0.0,
    seed: int = 0,
) -> Data:
    """Sample a contextual SBM graph (see the module docstring for the model).

    Args:
        num_nodes: N. (default: 3000)
        num_classes: C. (default: 5)
        avg_degree: Target mean degree d, so about ``N d / 2`` undirected edges. (default: 10.0)
        homophily: Target edge homophily h in [0, 1]; ``1 / C`` is a class-blind random graph. (default: 0.8)
        num_features: F. (default: 64)
        signal: Separation of the class means in noise standard deviations per dimension. (default: 1.0)
        imbalance: Class-size decay in [0, 1): class c has a share proportional to ``(1 - imbalance)^c``.
            (default: 0.0, balanced)
        seed: Seed of the generator; equal arguments give an identical graph. (default: 0)

    Returns:
        An undirected ``Data`` without self-loops or duplicate edges, with ``x`` (float32), ``y`` (int64),
        ``edge_index`` (coalesced, both directions), ``num_classes`` and ``name="csbm"``. No public split.

    Shapes:
        x: ``(N, F)``; y: ``(N,)``; edge_index: ``(2, 2M)``.

    Raises:
        ConfigError: A parameter out of range (the message names it).
    """
    check_csbm_params(num_nodes, num_classes, avg_degree, homophily, num_features, signal, imbalance, seed)
    n, c = int(num_nodes), int(num_classes)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xC5B3]))

    sizes = _class_sizes(n, c, float(imbalance))
    y = np.repeat(np.arange(c, dtype=np.int64), sizes)
    y = y[rng.permutation(n)]
    order = np.argsort(y, kind="stable")
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    m_total = int(round(n * float(avg_degree) / 2))
    targets = {True: int(round(float(homophily) * m_total))}
    targets[False] = m_total - targets[True]
    # capacity guards (the number of distinct pairs of each kind)
    cap_intra = int((sizes * (sizes - 1) // 2).sum())
    cap_inter = n * (n - 1) // 2 - cap_intra
    targets[True] = min(targets[True], cap_intra)
    targets[False] = min(targets[False], cap_inter)

    keys_all = []
    for intra in (True, False):
        need = targets[intra]
        keys = np.empty(0, dtype=np.int64)
        for _ in range(50):
            if keys.size >= need:
                break
            missing = need - keys.size
            u, v = _draw(rng, int(missing * 1.05) + 16, intra, y, order, start, sizes)
            ok = u != v
            lo, hi = np.minimum(u[ok], v[ok]), np.maximum(u[ok], v[ok])
            new = lo * n + hi
            # keep the first occurrence of each new pair, in draw order (deterministic)
            new_unique, first = np.unique(new, return_index=True)
            new = new[np.sort(first)] if new_unique.size else new_unique
            new = new[~np.isin(new, keys, assume_unique=False)]
            keys = np.concatenate([keys, new[:missing]])
        keys_all.append(keys)
    keys = np.concatenate(keys_all)
    lo, hi = np.divmod(keys, n)
    both = np.sort(np.concatenate([keys, hi * n + lo]))
    edge_index = torch.from_numpy(np.stack(np.divmod(both, n)))

    means = rng.standard_normal((c, int(num_features)), dtype=np.float32) * np.float32(
        float(signal) / math.sqrt(2)
    )
    x = rng.standard_normal((n, int(num_features)), dtype=np.float32)
    x += means[y]

    data = Data(x=torch.from_numpy(x), y=torch.from_numpy(y), edge_index=edge_index, num_nodes=n)
    data.num_classes = c
    data.name = "csbm"
    return data
