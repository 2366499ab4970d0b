"""Named run-config presets for FedSpray: the paper's settings and the official code's behaviour.

A preset is a nested mapping of run-config overrides (the sections of
:class:`securefgl.config.RunConfig`); it sets the algorithm, its options and the training settings
that FedSpray fixes, and leaves the dataset, the partition, the protocol and the backbone (``model.name``)
to the user. Later overrides (a config file, ``section.key=value`` flags) win over a preset.

- ``fedspray-paper``: the paper (spec §2.5, §4, "[PAPER]" column): 300 rounds, E = 5 epochs per phase,
  Adam with lr 0.003 (GNN and encoder) and 0.02 (proxies), :math:`\\lambda_1 = 5`, :math:`\\lambda_2 = 1`,
  hidden 64, no dropout or weight decay; the algorithm's option defaults (labelled proxies reset to their
  class proxy every round, every node in the GNN's distillation, projector from the global projector,
  Glorot GNN initialisation).
- ``fedspray-code``: the official code (commit d3e591a; spec §2.6 and §7): as above but 500 rounds,
  :math:`\\lambda_1 = 1`, persistent per-node proxies (``proxy_mode="code_persistent"``), distillation on
  labelled and confident (:math:`\\max q > 0.7`) nodes, the local projector loaded from the global classifier
  (``projector_init="global_p_quirk"``) and every GNN parameter drawn from :math:`U[0,1)`. The code selects
  the round with the lowest pooled validation loss; securefgl's engine selects by validation accuracy.

Example::

    from securefgl.algorithms.fedspray.presets import get_preset
    from securefgl.config import merge
    overrides = merge(get_preset("fedspray-code"), {"train": {"rounds": 100}})
"""

from __future__ import annotations

import copy
from typing import Any

from securefgl.errors import ConfigError

__all__ = ["PRESETS", "get_preset", "preset_names"]

_TRAIN = {"local_epochs": 5, "lr": 0.003, "weight_decay": 0.0, "optimizer": "adam"}
_MODEL = {"hidden": 64, "layers": 2, "dropout": 0.0}

#: Preset name -> nested run-config overrides.
PRESETS: dict[str, dict[str, Any]] = {
    "fedspray-paper": {
        "algorithm": {
            "name": "fedspray",
            "options": {
                "lambda1": 5.0,
                "lambda2": 1.0,
                "proxy_dim": 64,
                "proxy_lr": 0.02,
                "kd_conf_threshold": 0.0,
                "proxy_mode": "paper_reset",
                "projector_init": "global_q",
                "gnn_init": "glorot",
                "reset_optimizers": False,
            },
        },
        "model": dict(_MODEL),
        "train": {"rounds": 300, **_TRAIN},
    },
    "fedspray-code": {
        "algorithm": {
            "name": "fedspray",
            "options": {
                "lambda1": 1.0,
                "lambda2": 1.0,
                "proxy_dim": 64,
                "proxy_lr": 0.02,
                "kd_conf_threshold": 0.7,
                "proxy_mode": "code_persistent",
                "projector_init": "global_p_quirk",
                "gnn_init": "uniform01",
                "reset_optimizers": False,
                "encoder_weight": "train",
                "proxy_weight": "ratio",
                "proxy_init": 0.1,
            },
        },
        "model": dict(_MODEL),
        "train": {"rounds": 500, **_TRAIN},
    },
}


def preset_names() -> list[str]:
    """The preset names, sorted."""
    return sorted(PRESETS)


def get_preset(name: str) -> dict[str, Any]:
    """A deep copy of the overrides of preset ``name`` (case-insensitive, ``_`` equals ``-``).

    Raises:
        ConfigError: Unknown name; the message lists the valid ones.
    """
    key = name.strip().lower().replace("_", "-") if isinstance(name, str) else name
    if key not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; valid choices: {', '.join(preset_names())}")
    return copy.deepcopy(PRESETS[key])
