"""SecAgg (Bonawitz et al., CCS 2017): masking secure aggregation on the complete graph.

Practical Secure Aggregation for Privacy-Preserving Machine Learning, https://eprint.iacr.org/2017/281.
Every client shares its secrets with, and masks against, every other client; the threshold defaults to a
majority. This is :class:`~securefgl.protocols.secaggplus.SecAggPlus` configured with the complete graph
(one implementation, as Flower does): the stages, messages, checks and the designated-recipient mode are
documented there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import ClassVar, Literal

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from securefgl.protocols._identity import IdentityDirectory
from securefgl.protocols._prg import PrgAlgorithm
from securefgl.protocols._release import DEFAULT_MIN_CONTRIBUTORS
from securefgl.protocols.router import Interceptor
from securefgl.protocols.secaggplus import SecAggPlus

__all__ = ["SecAgg"]


class SecAgg(SecAggPlus):
    """SecAgg (Bonawitz et al. 2017, https://eprint.iacr.org/2017/281) on the complete graph.

    .. math::
        y_u = x_u + \\mathrm{PRG}(b_u) + \\sum_{v > u} \\mathrm{PRG}(k_{uv}) - \\sum_{v < u} \\mathrm{PRG}(k_{uv}),
        \\qquad \\sum_{u \\in U_3} x_u = \\sum_{u \\in U_3} \\big(y_u - \\mathrm{PRG}(b_u)\\big)
            - \\sum_{v \\in D} \\sum_{u \\in U_3} \\pm \\mathrm{PRG}(k_{uv}).

    Args:
        threshold: :math:`t` (int, or a fraction of :math:`n`); default a majority
            :math:`\\lfloor n/2 \\rfloor + 1`, raised above :math:`\\gamma n` corrupted clients.
        corrupt_rate: fraction of clients assumed to collude with the server (raises the default
            threshold only). (default: ``0.0``)
        adversary: ``"curious"`` or ``"semi-malicious"`` (the latter needs :math:`t > (n + \\gamma n)/2`).
        prg, record_views, workers, rng, interceptor, consistency_check, insecure_low_threshold,
            min_contributors, identities, identity_keys, insecure_seed, session_uses, optimistic_uses: as
            :class:`SecAggPlus`.
            A threshold at or below :math:`n/2` is refused unless ``insecure_low_threshold=True``.

    Security:
        As :class:`SecAggPlus` with one neighbourhood of all :math:`n` clients: the server and fewer than
        :math:`t` colluding clients learn only the sum over at least :math:`t` survivors; up to
        :math:`n - t` dropouts at any stage are tolerated. Client cost :math:`O(n + d\\,n)`, server
        unmasking :math:`O(d\\,n\\,|D|)` PRG expansions for :math:`|D|` dropouts.
    """

    name: ClassVar[str] = "secagg"
    _graph: ClassVar[Literal["harary", "complete"]] = "complete"

    def __init__(
        self,
        *,
        threshold: int | float | None = None,
        corrupt_rate: float = 0.0,
        adversary: Literal["curious", "semi-malicious", "none"] = "curious",
        prg: PrgAlgorithm = "aes256-ctr",
        record_views: bool = True,
        workers: int | None = None,
        rng: np.random.Generator | None = None,
        interceptor: Interceptor | None = None,
        consistency_check: bool | None = None,
        insecure_low_threshold: bool = False,
        min_contributors: int = DEFAULT_MIN_CONTRIBUTORS,
        identities: IdentityDirectory | str | os.PathLike[str] | None = None,
        identity_keys: Mapping[int, Ed25519PrivateKey] | None = None,
        insecure_seed: bytes | int | None = None,
        session_uses: int = 1,
        optimistic_uses: bool = False,
    ) -> None:
        super().__init__(
            graph="complete",
            threshold=threshold,
            dropout_rate=0.0,
            corrupt_rate=corrupt_rate,
            adversary=adversary,
            prg=prg,
            record_views=record_views,
            workers=workers,
            rng=rng,
            interceptor=interceptor,
            consistency_check=consistency_check,
            insecure_low_threshold=insecure_low_threshold,
            min_contributors=min_contributors,
            identities=identities,
            identity_keys=identity_keys,
            insecure_seed=insecure_seed,
            session_uses=session_uses,
            optimistic_uses=optimistic_uses,
        )
