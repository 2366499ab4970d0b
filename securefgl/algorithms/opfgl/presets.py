"""Named run presets for O-pFGL: the paper's per-dataset settings (spec ``shared/specs/opfgl.md`` §4.3).

A preset is a nested run-config mapping (the sections of :class:`securefgl.config.RunConfig`) for one
``(dataset, partition)``; explicit options given on the command line or in a config file are merged on top
of it. ``opfgl-paper`` reproduces ``run_main.sh`` of the paper's release: 10 clients, a 2-layer GCN with 64
hidden units and no dropout, ``h = 1``, seeds 0, 1, 2 over one partition, and the per-dataset condensation,
stage, γ, label-propagation and HRE settings below.

Example::

    from securefgl.algorithms.opfgl.presets import preset_config
    from securefgl.config import RunConfig, merge

    cfg = RunConfig.from_mapping(merge(preset_config("opfgl-paper", dataset="Cora", partition="louvain+"),
                                       {"protocol": {"name": "secagg"}}))
"""

from __future__ import annotations

import copy
from typing import Any

from securefgl.errors import ConfigError

__all__ = ["OPFGL_PAPER", "PAPER_HETERO_MODELS", "available_presets", "preset_config", "preset_cases"]

#: Shared by every ``opfgl-paper`` run (spec §4.3 header line and §1.2).
_COMMON_OPTIONS: dict[str, Any] = {
    "hops": 1,
    "condense_loops": 3000,
    "lr_feat": 5e-3,
    "lr_adj": 1e-3,
    "stage1_lr": 1e-4,
}

_ARXIV: dict[str, Any] = {
    "rate": 0.0025,
    "condense_loops": 2000,
    "lr_feat": 0.05,
    "lr_adj": 0.01,
    "stage1_lr": 5e-4,
    "stage2_lr": 5e-3,
    "patience": 5,
    "link_hidden": 256,
    "top_k": 4,
    "confidence_threshold": 0.95,
}

#: ``(dataset, partition) -> algorithm options`` (spec §4.3; ``None`` clamps are unbounded).
OPFGL_PAPER: dict[tuple[str, str], dict[str, Any]] = {
    ("Cora", "louvain+"): dict(
        stage2_lr=5e-5,
        patience=10,
        beta=0.2,
        gamma_max=0.15,
        lp_iters=2,
        lp_alpha=0.9,
        top_k=1,
        confidence_threshold=1.0,
        degree_threshold=20,
    ),
    ("CiteSeer", "louvain+"): dict(
        stage2_lr=5e-5,
        patience=10,
        beta=0.2,
        gamma_max=0.2,
        lp_iters=2,
        lp_alpha=0.9,
        top_k=1,
        confidence_threshold=0.95,
        degree_threshold=3,
    ),
    ("PubMed", "louvain+"): dict(
        stage2_lr=1e-3,
        patience=5,
        beta=1.0,
        gamma_min=0.05,
        gamma_max=0.1,
        lp_iters=4,
        lp_alpha=0.6,
        top_k=1,
        confidence_threshold=0.95,
        degree_threshold=0,
    ),
    ("ogbn-arxiv", "louvain+"): dict(
        _ARXIV, beta=0.5, gamma_max=0.15, lp_iters=2, lp_alpha=0.9, degree_threshold=15
    ),
    ("Cora", "metis+"): dict(
        stage2_lr=5e-5,
        patience=10,
        beta=0.2,
        gamma_max=0.2,
        lp_iters=2,
        lp_alpha=0.9,
        top_k=1,
        confidence_threshold=0.95,
        degree_threshold=0,
    ),
    ("CiteSeer", "metis+"): dict(
        stage2_lr=5e-5,
        patience=10,
        beta=0.2,
        gamma_min=0.05,
        gamma_max=0.15,
        lp_iters=2,
        lp_alpha=0.9,
        top_k=1,
        confidence_threshold=0.95,
        degree_threshold=3,
    ),
    ("PubMed", "metis+"): dict(
        stage2_lr=2e-3,
        patience=5,
        beta=5.0,
        gamma_min=0.05,
        gamma_max=0.2,
        lp_iters=4,
        lp_alpha=0.6,
        top_k=1,
        confidence_threshold=0.95,
        degree_threshold=0,
    ),
    ("ogbn-arxiv", "metis+"): dict(
        _ARXIV, beta=1.0, gamma_max=0.15, lp_iters=5, lp_alpha=0.6, degree_threshold=5
    ),
}

_PRESETS = {"opfgl-paper": OPFGL_PAPER}

#: The paper's heterogeneous-model setting (spec §2.12, Tables 3/11), one entry per client, as
#: ``algorithm.options.client_models``. ``appnp`` and ``ssgc`` need those model families in
#: :mod:`securefgl.nn` (not there yet: the option is refused with the list of valid models until they are).
PAPER_HETERO_MODELS: tuple[str, ...] = (
    "ssgc:K=2,layers=2,hidden=64",
    "gcn:layers=2,hidden=64",
    "gcn:layers=2,hidden=128",
    "gcn:layers=2,hidden=256",
    "gcn:layers=2,hidden=512",
    "sgc:K=2",
    "gcn:layers=3,hidden=64",
    "gcn:layers=3,hidden=512",
    "appnp:K=2,alpha=0.1,layers=2,hidden=64",
    "sgc:K=4",
)


def available_presets() -> list[str]:
    """Names of the O-pFGL presets."""
    return sorted(_PRESETS)


def preset_cases(name: str = "opfgl-paper") -> list[tuple[str, str]]:
    """The ``(dataset, partition)`` pairs a preset defines."""
    return list(_table(name))


def _table(name: str) -> dict[tuple[str, str], dict[str, Any]]:
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _PRESETS:
        raise ConfigError(f"unknown preset {name!r}; valid choices: {', '.join(available_presets())}")
    return _PRESETS[key]


def preset_config(name: str, *, dataset: str, partition: str) -> dict[str, Any]:
    """The run-config mapping of preset ``name`` for ``dataset`` under ``partition``.

    Args:
        name: ``"opfgl-paper"``.
        dataset: A dataset of the preset (case-insensitive), e.g. ``"Cora"``.
        partition: ``"louvain+"`` or ``"metis+"`` (``louvain``/``metis`` are accepted as the paper's names).

    Returns:
        A nested mapping with the sections ``dataset``, ``partition``, ``algorithm``, ``model`` and ``seeds``.

    Raises:
        ConfigError: Unknown preset, or a ``(dataset, partition)`` the preset does not define (the message
            lists the defined ones).
    """
    table = _table(name)
    part = partition.strip().lower()
    part = {"louvain": "louvain+", "metis": "metis+"}.get(part, part)
    match = [k for k in table if k[0].lower() == dataset.strip().lower() and k[1] == part]
    if not match:
        cases = ", ".join(f"{d}/{p}" for d, p in table)
        raise ConfigError(
            f"preset {name!r} has no settings for dataset={dataset!r}, partition={partition!r}; defined: {cases}"
        )
    ds, part = match[0]
    options = {**_COMMON_OPTIONS, **copy.deepcopy(table[match[0]])}
    return {
        "dataset": {"name": ds},
        "partition": {"method": part, "clients": 10, "seed": 42, "split": [0.2, 0.4, 0.4]},
        "algorithm": {"name": "opfgl", "options": options},
        "model": {"name": "gcn", "hidden": 64, "layers": 2, "dropout": 0.0},
        "seeds": [0, 1, 2],
    }
