"""The protocol registry: look protocols up by name, register new ones, wrap any of them with DP.

Names are normalised (case, ``_``/``-``/spaces, ``plus`` -> ``+``), so ``"SecAgg_Plus"``,
``"secaggplus"`` and ``"secagg+"`` are the same protocol. The suffix ``"+dp"`` (``"secagg+dp"``,
``"secagg++dp"``, ``"ckks_dp"``) wraps the base protocol with
:class:`securefgl.protocols.dp.DistributedDP`.

Built-in protocols are imported lazily by module path on first use, so the registry works (and lists
names) even when an optional module or its dependency is missing; asking for such a protocol raises a
:class:`~securefgl.errors.ConfigError` that names the module and the import failure.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from securefgl.errors import ConfigError
from securefgl.protocols.base import Protocol

__all__ = [
    "ProtocolSpec",
    "available_protocols",
    "get_protocol",
    "normalize_protocol_name",
    "parse_protocol",
    "register_protocol",
]

#: Built-in protocols: canonical name -> (module, class name). Imported on first use.
_BUILTIN: dict[str, tuple[str, str]] = {
    "plaintext": ("securefgl.protocols.plaintext", "PlaintextAggregation"),
    "secagg": ("securefgl.protocols.secagg", "SecAgg"),
    "secagg+": ("securefgl.protocols.secaggplus", "SecAggPlus"),
    "ckks": ("securefgl.protocols.ckks", "CKKSAggregation"),
}
_DP_MODULE = ("securefgl.protocols.dp", "DistributedDP")
_DP_SUFFIX = "+dp"
_ALIASES = {"plain": "plaintext", "secaggp": "secagg+", "bonawitz": "secagg", "he": "ckks"}

#: Explicitly registered classes (and built-ins once imported): canonical name -> class.
_REGISTRY: dict[str, type[Protocol]] = {}

_DP_SPLIT = re.compile(r"^(?P<base>.*?)[\s_\-+]?dp$")

_T = TypeVar("_T")


def _normalize_base(name: str) -> str:
    s = re.sub(r"[\s_\-]", "", name.strip().lower())
    s = s.replace("plus", "+")
    return _ALIASES.get(s, s)


class ProtocolSpec(str):
    """A protocol as configured: its canonical name, the base protocol, and whether distributed DP wraps it.

    The one place a protocol name is read: code asks ``spec.dp`` or ``spec.base`` instead of looking at the
    name (the spelling ``"secagg+dp"`` is sugar for ``ProtocolSpec.of("secagg", dp=True)``). A spec *is* its
    canonical name (a ``str``), so it prints, compares and serialises as the name.

    Args:
        name: A protocol name; case, separators and a ``+dp``/``_dp`` suffix are normalised.

    Attributes:
        base: Canonical name of the base protocol (``"plaintext"``, ``"secagg"``, ``"secagg+"``, ``"ckks"``, or a
            registered one).
        dp: Whether :class:`~securefgl.protocols.dp.DistributedDP` wraps it (noise inside the sum for the blocks
            an algorithm marks ``dp=True``).

    Raises:
        ConfigError: ``name`` is not a non-empty string.
    """

    base: str
    dp: bool

    def __new__(cls, name: str) -> ProtocolSpec:
        if isinstance(name, ProtocolSpec):
            return name
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"a protocol name must be a non-empty string, got {name!r}")
        raw = name.strip().lower()
        m = _DP_SPLIT.match(raw)
        dp = bool(m and m.group("base") and _normalize_base(m.group("base")) in _known_base_names())
        base = _normalize_base(m.group("base")) if (dp and m) else _normalize_base(raw)
        spec = super().__new__(cls, base + (_DP_SUFFIX if dp else ""))
        spec.base, spec.dp = base, dp
        return spec

    @classmethod
    def of(cls, base: str, *, dp: bool = False) -> ProtocolSpec:
        """The spec of ``base`` (a base protocol name), wrapped with DP when ``dp``."""
        spec = cls(base)
        if spec.dp:
            raise ConfigError(
                f"ProtocolSpec.of takes a base protocol name, got {base!r}; pass dp=True instead"
            )
        return cls(spec.base + _DP_SUFFIX) if dp else spec

    @property
    def name(self) -> str:
        """The canonical name as a plain ``str`` (``"secagg+dp"``)."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"ProtocolSpec({self.name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ProtocolSpec, (self.name,))


def parse_protocol(name: str) -> ProtocolSpec:
    """The :class:`ProtocolSpec` of a protocol name (``"SecAgg_Plus+DP"``: base ``"secagg+"``, ``dp`` true).

    Raises:
        ConfigError: ``name`` is not a non-empty string.
    """
    return ProtocolSpec(name)


def normalize_protocol_name(name: str) -> str:
    """The canonical form of a protocol name (``"SecAgg_Plus+DP"`` -> ``"secagg++dp"``).

    Raises:
        ConfigError: ``name`` is not a non-empty string.
    """
    return parse_protocol(name).name


def _known_base_names() -> list[str]:
    names = list(_BUILTIN)
    names += [n for n in _REGISTRY if n not in _BUILTIN]
    return names


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def available_protocols(*, with_dp: bool = True) -> list[str]:
    """Canonical names of the protocols that can be requested, built-ins first.

    A built-in is listed when its module is present (it may still fail to import if a dependency is
    missing; :func:`get_protocol` then says why). With ``with_dp``, every base name is also listed
    with the ``"+dp"`` suffix when the DP wrapper's module is present.
    """
    base = [n for n, (mod, _) in _BUILTIN.items() if n in _REGISTRY or _module_exists(mod)]
    base += [n for n in _REGISTRY if n not in _BUILTIN]
    if with_dp and _module_exists(_DP_MODULE[0]):
        base += [n + _DP_SUFFIX for n in list(base)]
    return base


def register_protocol(cls: type[Protocol], *, force: bool = False) -> type[Protocol]:
    """Register a protocol class under its normalised ``cls.name``; usable as a class decorator.

    Registering the same class twice is a no-op; another class under a taken name (built-ins
    included) is refused unless ``force=True``.

    Raises:
        ConfigError: ``cls`` is not a :class:`Protocol` subclass with a string ``name``, the name is
            taken, or it ends with the reserved ``"+dp"`` suffix.
    """
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise ConfigError(f"register_protocol expects a Protocol subclass, got {cls!r}")
    raw = getattr(cls, "name", None)
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(
            f"protocol class {cls.__qualname__} needs a non-empty string class attribute 'name'"
        )
    name = _normalize_base(raw)
    if name.endswith(_DP_SUFFIX):
        raise ConfigError(f"protocol name {raw!r} ends with the reserved DP suffix {_DP_SUFFIX!r}")
    current = _REGISTRY.get(name)
    if current is cls:
        return cls
    taken = current is not None or (name in _BUILTIN and not _is_builtin_class(name, cls))
    if taken and not force:
        owner = (
            f"{current.__module__}.{current.__qualname__}"
            if current is not None
            else ".".join(_BUILTIN[name])
        )
        raise ConfigError(
            f"protocol name {name!r} is already registered to {owner}; pass force=True to replace it"
        )
    _REGISTRY[name] = cls
    return cls


def _is_builtin_class(name: str, cls: type) -> bool:
    module, attr = _BUILTIN[name]
    return cls.__module__ == module and cls.__qualname__ == attr


def _load_builtin(name: str) -> type[Protocol]:
    module, attr = _BUILTIN[name]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"protocol {name!r} is unavailable: importing {module} failed ({exc}); "
            f"available: {available_protocols()}"
        ) from exc
    cls = getattr(mod, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise ConfigError(f"protocol {name!r}: {module}.{attr} is not a Protocol subclass")
    _REGISTRY.setdefault(name, cls)
    return _REGISTRY[name]


def _resolve(name: str, raw: str | None = None) -> type[Protocol]:
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _BUILTIN:
        return _load_builtin(name)
    shown = repr(raw) if raw is not None and raw != name else repr(name)
    raise ConfigError(f"unknown protocol {shown}; valid: {available_protocols()}")


def _construct(cls: type[_T], label: str, options: Mapping[str, Any], *args: Any) -> _T:
    try:
        inspect.signature(cls).bind(*args, **options)
    except TypeError as exc:
        params = [
            p.name
            for p in inspect.signature(cls).parameters.values()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        ][len(args) :]
        raise ConfigError(f"invalid options for {label}: {exc}; accepted options: {params}") from None
    return cls(*args, **options)


def get_protocol(name: str, **options: Any) -> Protocol:
    """Build the protocol called ``name`` with ``options`` passed to its constructor.

    For a ``"+dp"`` name, DP options are passed either as ``dp={...}`` or as ``dp_``-prefixed keywords
    (``dp_epsilon=1.0`` -> ``epsilon=1.0``) to :class:`~securefgl.protocols.dp.DistributedDP`, which
    wraps the base protocol built from the remaining options.

    Args:
        name: a protocol name (see :func:`available_protocols`); case and separators do not matter.
        **options: constructor options of the protocol.

    Raises:
        ConfigError: unknown name (the message lists the valid ones), a protocol whose module cannot be
            imported, or options its constructor does not accept.
    """
    spec = parse_protocol(name)
    canonical = spec.name
    if spec.dp:
        base_name = spec.base
        dp_opts = dict(options.pop("dp", None) or {})
        for key in [k for k in options if k.startswith("dp_")]:
            dp_opts[key[3:]] = options.pop(key)
        base = _construct(_resolve(base_name, str(name)), f"protocol {base_name!r}", options)
        module, attr = _DP_MODULE
        try:
            wrapper: type[Protocol] = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(
                f"protocol {canonical!r} needs the DP wrapper {module}.{attr}, which is unavailable ({exc}); "
                f"available: {available_protocols(with_dp=False)}"
            ) from exc
        return _construct(wrapper, f"the DP wrapper of {base_name!r}", dp_opts, base)
    if "dp" in options or any(k.startswith("dp_") for k in options):
        raise ConfigError(f"DP options given for protocol {canonical!r}; use {canonical + _DP_SUFFIX!r}")
    return _construct(_resolve(canonical, str(name)), f"protocol {canonical!r}", options)
