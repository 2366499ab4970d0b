"""securefgl.algorithms: federated graph-learning algorithms, one module each, registered by name.

The interface every algorithm implements is :class:`~securefgl.algorithms.base.Algorithm`; look algorithms
up with :func:`~securefgl.algorithms.registry.get_algorithm` and validate a combination before a run with
:func:`~securefgl.algorithms.registry.check_combination`.
"""

from __future__ import annotations

# Algorithm modules register themselves when imported (one import per module, below).
# --- algorithm modules ---
import securefgl.algorithms.adafgl  # noqa: F401, E402
import securefgl.algorithms.baselines  # noqa: F401, E402
import securefgl.algorithms.fedlog  # noqa: F401, E402
import securefgl.algorithms.fedspray  # noqa: F401, E402
import securefgl.algorithms.fedstruct  # noqa: F401, E402
import securefgl.algorithms.gap  # noqa: F401, E402
import securefgl.algorithms.opfgl  # noqa: F401, E402
from securefgl.algorithms.base import (
    Algorithm,
    Broadcast,
    Client,
    CompatibilityProblem,
    Phase,
    RoundState,
    Setting,
    SumRequest,
)
from securefgl.algorithms.registry import (
    available_algorithms,
    check_combination,
    create_algorithm,
    find_problems,
    get_algorithm,
    register_algorithm,
)

# --- end algorithm modules ---

__all__ = [
    "Algorithm",
    "Broadcast",
    "Client",
    "CompatibilityProblem",
    "Phase",
    "RoundState",
    "Setting",
    "SumRequest",
    "available_algorithms",
    "check_combination",
    "create_algorithm",
    "find_problems",
    "get_algorithm",
    "register_algorithm",
]
