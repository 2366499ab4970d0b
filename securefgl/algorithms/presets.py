"""One lookup for every named run preset (``securefgl run --preset NAME``).

- ``opfgl-paper``: O-pFGL's per-dataset settings (spec ``opfgl.md`` §4.3), chosen by the dataset and the
  partition (``louvain+`` or ``metis+``); see :mod:`securefgl.algorithms.opfgl.presets`.
- ``fedspray-paper`` / ``fedspray-code``: FedSpray as the paper states it and as the official code behaves;
  see :mod:`securefgl.algorithms.fedspray.presets`.

A preset is the lowest layer of a run's config: a config file, the command's options and ``--set`` win over it.
"""

from __future__ import annotations

from typing import Any

from securefgl.algorithms.fedspray import presets as fedspray_presets
from securefgl.algorithms.opfgl import presets as opfgl_presets
from securefgl.errors import ConfigError

__all__ = ["preset_names", "resolve_preset"]


def preset_names() -> list[str]:
    """Every preset name, sorted."""
    return sorted([*opfgl_presets.available_presets(), *fedspray_presets.preset_names()])


def resolve_preset(name: str, *, dataset: str | None = None, partition: str | None = None) -> dict[str, Any]:
    """The run-config mapping of preset ``name``.

    Args:
        name: One of :func:`preset_names` (case-insensitive).
        dataset, partition: Pick the per-dataset settings of presets that have them (``opfgl-paper``).

    Raises:
        ConfigError: Unknown name (valid ones listed), or a per-dataset preset without the dataset and
            partition it needs (the defined pairs are listed).
    """
    key = name.strip().lower().replace("_", "-") if isinstance(name, str) else ""
    if key in opfgl_presets.available_presets():
        if not dataset or not partition:
            cases = ", ".join(f"{d}/{p}" for d, p in opfgl_presets.preset_cases(key))
            raise ConfigError(
                f"preset {name!r} has per-dataset settings: give --dataset and --partition (defined: {cases})"
            )
        return opfgl_presets.preset_config(key, dataset=dataset, partition=partition)
    if key in fedspray_presets.preset_names():
        return fedspray_presets.get_preset(key)
    raise ConfigError(f"unknown preset {name!r}; valid choices: {', '.join(preset_names())}")
