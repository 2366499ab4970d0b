"""Device selection: ``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``cuda:i``."""

from __future__ import annotations

import re

import torch

from securefgl.errors import ConfigError

__all__ = ["check_device_string", "resolve_device"]

_PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def check_device_string(device: str) -> str:
    """Validate the spelling of a device string (without looking at the hardware).

    Raises:
        ConfigError: Anything but ``auto``, ``cpu``, ``cuda`` or ``cuda:<index>``.
    """
    if not isinstance(device, str) or not _PATTERN.match(device.strip().lower()):
        raise ConfigError(f"unknown device {device!r}; valid: 'auto', 'cpu', 'cuda', 'cuda:<index>'")
    return device.strip().lower()


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The :class:`torch.device` a run uses.

    Args:
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:i"`` or a ``torch.device``.

    Raises:
        ConfigError: Bad spelling, CUDA asked for but not available, or a CUDA index out of range.
    """
    if isinstance(device, torch.device):
        device = str(device)
    name = check_device_string(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r} asks for CUDA, but CUDA is not available on this machine "
            f"(torch {torch.__version__}); use --device cpu or --device auto"
        )
    dev = torch.device(name)
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ConfigError(
            f"device {device!r}: CUDA index {dev.index} out of range; {count} device(s) present"
        )
    return dev
