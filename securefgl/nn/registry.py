"""Models by name: :class:`ModelSpec` (the ``[model]`` config section) and :func:`build_model`.

Each model family registers itself with :func:`register_model` when its module is imported
(``securefgl.nn`` imports them all, and Python runs a package's ``__init__`` before any of its modules, so
the built-ins are registered before any lookup here). Names are case-insensitive; aliases (``graphsage`` -> ``sage``) map
to one canonical name, and an unknown name raises :class:`~securefgl.errors.ConfigError` listing the valid
ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from securefgl.errors import ConfigError

__all__ = [
    "ModelSpec",
    "available_models",
    "build_model",
    "get_model_class",
    "normalize_model_name",
    "register_model",
]

M = TypeVar("M", bound=type)

_MODELS: dict[str, type] = {}
_ALIASES: dict[str, str] = {}


@dataclass(frozen=True)
class ModelSpec:
    """The architecture of a run (config section ``[model]``).

    Args:
        name: Model family: ``gcn``, ``sage`` (alias ``graphsage``), ``sgc``, ``gat``, ``mlp``.
            (default: ``"gcn"``)
        hidden: Hidden width (per head for GAT). (default: ``64``)
        layers: Number of layers (message-passing or linear). (default: ``2``)
        dropout: Feature dropout before every layer. (default: ``0.5``)
        options: Family-specific options, validated by the family (GAT: ``heads``, ``attention_dropout``;
            SGC: ``K``). (default: ``{}``)
    """

    name: str = "gcn"
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", normalize_model_name(self.name))
        if self.hidden < 1:
            raise ConfigError(f"model.hidden must be >= 1, got {self.hidden}")
        if self.layers < 1:
            raise ConfigError(f"model.layers must be >= 1, got {self.layers}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout}")
        cls = _MODELS[self.name]
        opts_cls = getattr(cls, "Options", None)
        if opts_cls is not None:
            from securefgl.config.loader import build

            build(opts_cls, self.options, where="model.options")
        elif self.options:
            raise ConfigError(f"model {self.name!r} takes no options, got {sorted(self.options)}")

    def family_options(self) -> Any:
        """The validated family options dataclass (defaults filled in)."""
        opts_cls = getattr(_MODELS[self.name], "Options", None)
        if opts_cls is None:
            return None
        from securefgl.config.loader import build

        return build(opts_cls, self.options, where="model.options")


def register_model(name: str, *, aliases: tuple[str, ...] = (), force: bool = False) -> Callable[[M], M]:
    """Class decorator registering a model family under ``name`` (and ``aliases``).

    Raises:
        ConfigError: The name is taken and ``force`` is off.
    """

    def deco(cls: M) -> M:
        key = name.strip().lower()
        if key in _MODELS and _MODELS[key] is not cls and not force:
            raise ConfigError(f"model name {key!r} is already registered; pass force=True to replace it")
        _MODELS[key] = cls
        for a in aliases:
            _ALIASES[a.strip().lower()] = key
        return cls

    return deco


def normalize_model_name(name: str) -> str:
    """Canonical model name; raises ConfigError listing the valid names for an unknown one."""
    if not isinstance(name, str):
        raise ConfigError(f"model name must be a string, got {name!r}")
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in _MODELS:
        raise ConfigError(f"unknown model {name!r}; valid choices: {', '.join(available_models())}")
    return key


def available_models() -> list[str]:
    """Sorted canonical names of the registered model families."""
    return sorted(_MODELS)


def get_model_class(name: str) -> type:
    """The model class registered as ``name`` (or an alias)."""
    return _MODELS[normalize_model_name(name)]


def build_model(
    spec: ModelSpec | str,
    in_channels: int,
    out_channels: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.nn.Module:
    """A freshly initialised model.

    Parameters are created without touching the global RNG (on the meta device) and then initialised from
    ``generator`` (Glorot-uniform weights, zero biases).

    Args:
        spec: A :class:`ModelSpec` or a model name (defaults for the rest).
        in_channels: ``F``.
        out_channels: ``C``.
        generator: Source of the initial weights; ``None`` uses a fresh OS-seeded generator.
        device: Target device. (default: CPU)
    """
    if isinstance(spec, str):
        spec = ModelSpec(name=spec)
    cls = _MODELS[normalize_model_name(spec.name)]
    opts = spec.family_options()
    kwargs = dataclasses.asdict(opts) if opts is not None else {}
    with torch.device("meta"):
        model = cls(
            in_channels, out_channels, hidden=spec.hidden, layers=spec.layers, dropout=spec.dropout, **kwargs
        )
    device = torch.device(device) if device is not None else torch.device("cpu")
    model = model.to_empty(device=device)
    if generator is None:
        generator = torch.Generator(device="cpu")
        generator.seed()
    from securefgl.nn._functional import init_parameters

    init_parameters(model, generator)
    return model
