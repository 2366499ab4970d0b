"""Algorithms by name, and the compatibility check that runs before any work starts.

Algorithms register themselves with :func:`register_algorithm` when their module is imported (the
package ``securefgl.algorithms`` imports every built-in one, and Python runs a package's ``__init__``
before any of its modules, so the built-ins are registered before any lookup here). Names are normalised
(case-insensitive, ``_`` and ``-`` equivalent); an unknown name raises
:class:`~securefgl.errors.ConfigError` listing the valid ones; registering a name twice is refused unless
``force=True``. :func:`check_algorithm_options` validates the ``[algorithm]`` section of a run config.

:func:`check_combination` validates algorithm x protocol x model x dataset (plus client count and dropout)
and raises one :class:`~securefgl.errors.UnsupportedCombinationError` that lists *every* problem, each with
its reason and a remedy, telling "never supportable" apart from "not supported yet".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from securefgl.algorithms.base import Algorithm, CompatibilityProblem, Setting, parse_options
from securefgl.errors import ConfigError, UnsupportedCombinationError
from securefgl.protocols.registry import ProtocolSpec, parse_protocol

__all__ = [
    "available_algorithms",
    "check_algorithm_options",
    "check_combination",
    "create_algorithm",
    "find_problems",
    "get_algorithm",
    "normalize_name",
    "register_algorithm",
]

A = TypeVar("A", bound=type[Algorithm])

_REGISTRY: dict[str, type[Algorithm]] = {}


def normalize_name(name: str) -> str:
    """Canonical registry key: stripped, lower case, ``_`` -> ``-``."""
    if not isinstance(name, str):
        raise ConfigError(f"an algorithm name must be a string, got {name!r}")
    return name.strip().lower().replace("_", "-")


@overload
def register_algorithm(cls: A, *, force: bool = False) -> A: ...


@overload
def register_algorithm(cls: None = None, *, force: bool = False) -> Callable[[A], A]: ...


def register_algorithm(cls: A | None = None, *, force: bool = False) -> A | Callable[[A], A]:
    """Class decorator: register an :class:`Algorithm` subclass under its ``name``.

    Args:
        cls: The class (when used as ``@register_algorithm``).
        force: Replace an existing registration of the same name. (default: ``False``)

    Raises:
        ConfigError: The class is not an Algorithm, has no name, or the name is taken and ``force`` is off.
    """

    def deco(c: A) -> A:
        if not (isinstance(c, type) and issubclass(c, Algorithm)):
            raise ConfigError(f"register_algorithm needs an Algorithm subclass, got {c!r}")
        if not c.name:
            raise ConfigError(f"{c.__name__} has no `name`; set the class attribute before registering")
        key = normalize_name(c.name)
        if key in _REGISTRY and _REGISTRY[key] is not c and not force:
            raise ConfigError(
                f"algorithm name {key!r} is already registered by {_REGISTRY[key].__module__}."
                f"{_REGISTRY[key].__qualname__}; pass force=True to replace it"
            )
        _REGISTRY[key] = c
        return c

    return deco if cls is None else deco(cls)


def available_algorithms() -> list[str]:
    """Sorted names of every registered algorithm."""
    return sorted(_REGISTRY)


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class registered as ``name``.

    Raises:
        ConfigError: Unknown name; the message lists the valid ones.
    """
    key = normalize_name(name)
    try:
        return _REGISTRY[key]
    except KeyError:
        raise ConfigError(
            f"unknown algorithm {name!r}; valid choices: {', '.join(sorted(_REGISTRY))}"
        ) from None


def check_algorithm_options(name: str, options: Mapping[str, Any] | None, *, where: str) -> str:
    """Validate an algorithm name and its options (the ``[algorithm]`` section of a run config).

    Args:
        name: Algorithm name, in any spelling :func:`normalize_name` accepts.
        options: The options, validated against the algorithm's ``Options`` dataclass.
        where: Dotted key used in error messages, e.g. ``"algorithm.options"``.

    Returns:
        The canonical name.

    Raises:
        ConfigError: Unknown name (listing the valid ones), or invalid options (naming the key).
    """
    cls = get_algorithm(name)
    parse_options(cls.Options, options, where=where)
    return normalize_name(name)


def create_algorithm(name: str, setting: Setting, options: Mapping[str, Any] | Any = None) -> Algorithm:
    """Build and seal the algorithm ``name`` for ``setting`` with validated ``options``."""
    algorithm = get_algorithm(name)(setting, options)
    algorithm.seal()
    return algorithm


def _protocol_names() -> list[str]:
    from securefgl.protocols.registry import available_protocols

    return list(available_protocols())


def _model_names() -> list[str]:
    from securefgl.nn.registry import available_models

    return list(available_models())


def _protocol_key(
    protocol: str, problems: list[CompatibilityProblem]
) -> tuple[ProtocolSpec | None, str, list[str]]:
    """``(spec, key, known names)`` of ``protocol``; an unknown name is appended to ``problems``."""
    pnames = _protocol_names()
    spec: ProtocolSpec | None = None
    with contextlib.suppress(ConfigError):  # an invalid name is reported as unknown just below
        spec = parse_protocol(protocol)
    pkey = spec.name if spec is not None else protocol
    if pkey not in pnames:
        problems.append(
            CompatibilityProblem(
                f"unknown protocol {protocol!r}", f"choose one of: {', '.join(pnames)}", True
            )
        )
    return spec, pkey, pnames


def _model_key(model: str, problems: list[CompatibilityProblem]) -> str | None:
    """The canonical model name, or ``None`` (appended to ``problems``) when unknown."""
    mnames = _model_names()
    from securefgl.nn.registry import normalize_model_name

    try:
        return normalize_model_name(model)
    except ConfigError:
        problems.append(
            CompatibilityProblem(f"unknown model {model!r}", f"choose one of: {', '.join(mnames)}", True)
        )
        return None


def _dataset_key(dataset: str, problems: list[CompatibilityProblem]) -> str | None:
    """The canonical dataset name, or ``None`` (appended to ``problems``) when unknown."""
    try:
        from securefgl.data.datasets import canonical_name

        return canonical_name(dataset, error=ConfigError, key="dataset")
    except ConfigError as exc:
        problems.append(CompatibilityProblem(str(exc), "run `securefgl datasets` for the list", True))
        return None


def _algorithm_problems(
    cls: type[Algorithm],
    options: Mapping[str, Any] | None,
    spec: ProtocolSpec | None,
    pkey: str,
    pnames: list[str],
    mkey: str | None,
    dkey: str | None,
    num_clients: int | None,
    dropout: float,
) -> list[CompatibilityProblem]:
    """The problems of a known algorithm with the rest of the combination (its own checks last)."""
    problems: list[CompatibilityProblem] = []
    if options is not None:
        try:
            parse_options(cls.Options, options, where=f"algorithm.options ({cls.name})")
        except ConfigError as exc:
            problems.append(CompatibilityProblem(str(exc), "fix the algorithm options", True))
    if mkey is not None and cls.supported_models is not None and mkey not in cls.supported_models:
        problems.append(
            CompatibilityProblem(
                f"algorithm {cls.name!r} does not train model {mkey!r}",
                f"use one of: {', '.join(sorted(cls.supported_models))}",
                False,
            )
        )
    if spec is not None and spec.dp and not cls.dp_blocks:
        problems.append(
            CompatibilityProblem(
                f"algorithm {cls.name!r} marks no block for differential privacy, so protocol {pkey!r} "
                "would add no noise",
                f"use protocol {spec.base!r}, or an algorithm with DP support",
                False,
            )
        )
    if dropout and not cls.uses_protocol:
        problems.append(
            CompatibilityProblem(
                f"algorithm {cls.name!r} never communicates, so a dropout fraction of {dropout} has no meaning",
                "drop the --dropout option",
                True,
            )
        )
    if dkey is not None and spec is not None and pkey in pnames and mkey is not None:
        problems.extend(
            cls.compatibility(
                protocol=spec, model=mkey, dataset=dkey, options=options, num_clients=num_clients
            )
        )
    return problems


def find_problems(
    algorithm: str,
    protocol: str,
    model: str,
    dataset: str,
    *,
    options: Mapping[str, Any] | None = None,
    num_clients: int | None = None,
    dropout: float = 0.0,
) -> list[CompatibilityProblem]:
    """Every problem with a combination, without raising (empty list: it can run).

    Args:
        algorithm: Algorithm name.
        protocol: Protocol name (``plaintext``, ``secagg``, ``secagg+``, ``ckks``, optionally ``+dp``).
        model: Model name (``gcn``, ``sage``, ``sgc``, ``gat``, ``mlp``).
        dataset: Dataset name (canonical or not).
        options: The algorithm's options (validated here too).
        num_clients: Number of clients K, if known.
        dropout: Fraction of each round's clients that drop out.
    """
    problems: list[CompatibilityProblem] = []
    akey = normalize_name(algorithm)
    cls = _REGISTRY.get(akey)
    if cls is None:
        problems.append(
            CompatibilityProblem(
                f"unknown algorithm {algorithm!r}", f"choose one of: {', '.join(sorted(_REGISTRY))}", True
            )
        )
    spec, pkey, pnames = _protocol_key(protocol, problems)
    mkey = _model_key(model, problems)
    dkey = _dataset_key(dataset, problems)
    if not 0.0 <= float(dropout) < 1.0:
        problems.append(
            CompatibilityProblem(
                f"dropout fraction {dropout!r} is outside [0, 1)", "pass a value in [0, 1)", True
            )
        )
    if cls is not None:
        problems.extend(
            _algorithm_problems(cls, options, spec, pkey, pnames, mkey, dkey, num_clients, dropout)
        )
    return problems


def check_combination(
    algorithm: str,
    protocol: str,
    model: str,
    dataset: str,
    *,
    options: Mapping[str, Any] | None = None,
    num_clients: int | None = None,
    dropout: float = 0.0,
) -> None:
    """Raise one :class:`UnsupportedCombinationError` listing every problem of a combination.

    See :func:`find_problems` for the arguments. Runs before any data is loaded or model built.
    """
    problems = find_problems(
        algorithm, protocol, model, dataset, options=options, num_clients=num_clients, dropout=dropout
    )
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        err = UnsupportedCombinationError(
            f"cannot run algorithm={algorithm!r} protocol={protocol!r} model={model!r} dataset={dataset!r}:\n"
            f"{lines}"
        )
        err.problems = problems  # type: ignore[attr-defined]
        raise err
