"""The protocol a run uses: built from the run's configuration, and checked against the size of its rounds.

One place for what the simulation (:mod:`securefgl.engine.runner`), the command line's checks before a run and
a deployment's parties (:mod:`securefgl.deploy.parties`) all build, so that they build the same protocol.
"""

from __future__ import annotations

from typing import Any

from securefgl.config.run import RunConfig
from securefgl.errors import ConfigError
from securefgl.protocols.base import Protocol

__all__ = ["build_run_protocol", "check_round_size", "plaintext_protocol"]


def plaintext_protocol() -> Protocol:
    """The plaintext protocol (the evaluation sums of a run whose algorithm never communicates)."""
    from securefgl.protocols.registry import get_protocol

    return get_protocol("plaintext")


def build_run_protocol(config: RunConfig, per_round: int, k_all: int) -> Protocol:
    """The run's protocol; a ``+dp`` target epsilon lasts ``train.rounds`` rounds unless told otherwise.

    Raises:
        ConfigError: bad protocol or DP options.
    """
    from securefgl.protocols.registry import get_protocol

    options = dict(config.protocol.options)
    spec = config.protocol.spec
    if spec.dp:
        if "dp_epsilon" in options and "dp_rounds" not in options:
            options["dp_rounds"] = int(config.train.rounds)
        if "dp_sample_rate" not in options and per_round < k_all:
            options["dp_sample_rate"] = per_round / k_all
        if "dp_sampler" not in options:
            # Amplification only for the sampler the accountant assumes (clients' own Poisson coins).
            options["dp_sampler"] = "poisson" if config.train.client_sampling == "poisson" else "server"
        try:
            return get_protocol(spec, **options)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc} (DP options go in protocol.options with a dp_ prefix, e.g. --set "
                "protocol.options.dp_min_contributors=9 --set protocol.options.dp_clip_norm=1.0 --set "
                "protocol.options.dp_epsilon=8)"
            ) from exc
    return get_protocol(spec, **options)


def check_round_size(protocol: Protocol, spec: Any, per_round: int) -> None:
    """Refuse a simulated run whose rounds are smaller than the smallest sum the protocol (or its DP wrapper)
    releases, before any training (a deployment leaves that refusal to the clients, who enforce it).

    Raises:
        ConfigError: ``per_round`` below ``min_contributors``.
    """
    inner = getattr(protocol, "base", protocol)
    floors = [getattr(p, "min_contributors", None) for p in (protocol, inner)]
    smallest = max((m for m in floors if isinstance(m, int)), default=1)
    if per_round >= smallest:
        return
    other = (
        "--protocol plaintext for a federation of one"
        if per_round == 1
        else f"--set protocol.options.dp_min_contributors={per_round} (DP's noise floor is set for that many)"
    )
    raise ConfigError(
        f"--protocol {spec} releases no sum of fewer than {smallest} inputs (min_contributors), and every "
        f"round has {per_round} client(s): the first sum would be refused. Use at least {smallest} clients per "
        f"round (--clients, train.clients_per_round), or {other}"
    )
