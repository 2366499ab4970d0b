"""ReleaseGuard: no two released sums of one statistic may differ by fewer than m clients."""

from __future__ import annotations

import pytest
import torch

from securefgl.errors import ConfigError, ReleaseRefusedError
from securefgl.protocols.base import DropoutPlan
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.registry import get_protocol
from securefgl.protocols.release_guard import ReleaseGuard, statistic_key

SCHEMA = SumSchema([BlockSpec("v", (3,), bound=2.0)], max_clients=6)
INPUTS = {c: {"v": torch.full((3,), 0.1 * (c + 1))} for c in range(6)}


def _sub(ids):
    return {c: INPUTS[c] for c in ids}


def test_difference_mode_refuses_one_client_differences_only():
    g = ReleaseGuard(get_protocol("plaintext"), min_difference=2)
    s, tr = g.aggregate(SCHEMA, _sub(range(6)), context=b"stat")
    assert torch.allclose(s["v"], torch.full((3,), 2.1), atol=1e-6)
    assert tr.extra["release_guard"]["refused"] is False
    with pytest.raises(ReleaseRefusedError, match="differs from this one by 1"):
        g.aggregate(SCHEMA, _sub(range(5)), context=b"stat")
    g.aggregate(SCHEMA, _sub(range(4)), context=b"stat")  # differs by 2: allowed
    g.aggregate(SCHEMA, _sub(range(6)), context=b"stat")  # the same set again: nothing new
    g.aggregate(SCHEMA, _sub(range(5)), context=b"another round context")  # another statistic
    assert len(g.released_sets(SCHEMA, b"stat")) == 3


def test_refusal_after_a_dropout_is_caught_on_the_survivors():
    g = ReleaseGuard(get_protocol("secagg"), min_difference=3)
    g.aggregate(SCHEMA, _sub(range(6)))
    with pytest.raises(ReleaseRefusedError, match="release refused") as err:
        g.aggregate(SCHEMA, _sub(range(6)), dropouts=DropoutPlan({4: "masked_input"}))
    assert err.value.transcript.extra["release_guard"]["refused"] is True


def test_fixed_mode_and_validation():
    g = ReleaseGuard(get_protocol("plaintext"), mode="fixed")
    g.aggregate(SCHEMA, _sub(range(6)))
    with pytest.raises(ReleaseRefusedError, match="fixed for this session"):
        g.aggregate(SCHEMA, _sub(range(3)))
    g.aggregate(SCHEMA, _sub(range(6)))
    with pytest.raises(ConfigError, match="min_difference"):
        ReleaseGuard(get_protocol("plaintext"), min_difference=1)
    with pytest.raises(ConfigError, match="mode"):
        ReleaseGuard(get_protocol("plaintext"), mode="loose")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Protocol"):
        ReleaseGuard("secagg")  # type: ignore[arg-type]
    assert statistic_key(SCHEMA, b"a", None) != statistic_key(SCHEMA, b"b", None)
    assert statistic_key(SCHEMA, {0: b"a"}, None) != statistic_key(SCHEMA, b"a", None)
