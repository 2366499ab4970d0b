"""Tests for securefgl.protocols.registry: names, lazy built-ins, refusal of silent overwrites, +dp."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pytest

import securefgl.protocols as protocols
from securefgl.errors import ConfigError
from securefgl.protocols import registry
from securefgl.protocols.base import Protocol, Sums, Transcript
from securefgl.protocols.encoding import BlockSpec, SumSchema
from securefgl.protocols.registry import (
    available_protocols,
    get_protocol,
    normalize_protocol_name,
    register_protocol,
)


@pytest.fixture(autouse=True)
def _restore_registry() -> Iterator[None]:
    saved = dict(registry._REGISTRY)
    saved_builtin = dict(registry._BUILTIN)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
    registry._BUILTIN.clear()
    registry._BUILTIN.update(saved_builtin)


class SummingProtocol(Protocol):
    """A small but real protocol for registry tests: sums packed vectors in float64."""

    name = "Test_Sum"

    def __init__(self, *, scale: float = 1.0) -> None:
        self.scale = scale

    def aggregate(
        self,
        schema: SumSchema,
        contributions: Mapping[int, Mapping],
        *,
        dropouts=None,
        round_index: int = 0,
        recipient: int | None = None,
        context: bytes | Mapping[int, bytes] = b"",
    ) -> tuple[Sums, Transcript]:
        total = sum(schema.pack(c)[0] for c in contributions.values()) * self.scale
        sums = schema.release(schema.unpack(total), len(contributions))
        return sums, Transcript(protocol=self.name, invited=tuple(contributions))


class OtherProtocol(SummingProtocol):
    name = "test-sum"


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("plaintext", "plaintext"),
        ("PlainText", "plaintext"),
        (" plain ", "plaintext"),
        ("secagg", "secagg"),
        ("SecAgg", "secagg"),
        ("secagg+", "secagg+"),
        ("secagg_plus", "secagg+"),
        ("secaggplus", "secagg+"),
        ("SecAgg-Plus", "secagg+"),
        ("CKKS", "ckks"),
        ("secagg+dp", "secagg+dp"),
        ("SecAgg_DP", "secagg+dp"),
        ("secagg++dp", "secagg++dp"),
        ("secagg_plus+dp", "secagg++dp"),
        ("SecAggPlus_DP", "secagg++dp"),
        ("ckks-dp", "ckks+dp"),
        ("plaintext+DP", "plaintext+dp"),
    ],
)
def test_normalisation(raw: str, canonical: str) -> None:
    assert normalize_protocol_name(raw) == canonical


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_bad_names(bad: object) -> None:
    with pytest.raises(ConfigError, match="non-empty string"):
        normalize_protocol_name(bad)  # type: ignore[arg-type]


def test_unknown_name_lists_valid_choices() -> None:
    with pytest.raises(ConfigError) as exc:
        get_protocol("securesum")
    msg = str(exc.value)
    assert "'securesum'" in msg and "valid:" in msg
    for name in available_protocols(with_dp=False):
        assert repr(name) in msg


def test_builtin_plaintext_is_lazy_and_listed() -> None:
    assert available_protocols()[0] == "plaintext"
    proto = get_protocol("Plain_Text")
    assert type(proto).__name__ == "PlaintextAggregation" and proto.reveals_individual_inputs
    assert protocols.PlaintextAggregation is type(proto)


def test_missing_builtin_module_gives_clear_error() -> None:
    registry._BUILTIN["ghost"] = ("securefgl.protocols._no_such_module", "Ghost")
    assert "ghost" not in available_protocols()
    with pytest.raises(
        ConfigError, match=r"protocol 'ghost' is unavailable: importing securefgl.protocols._no_such"
    ):
        get_protocol("ghost")


def test_builtin_module_without_protocol_class() -> None:
    registry._BUILTIN["notproto"] = ("securefgl.protocols.encoding", "SumSchema")
    with pytest.raises(ConfigError, match="not a Protocol subclass"):
        get_protocol("notproto")


def test_register_and_get_custom_protocol() -> None:
    assert register_protocol(SummingProtocol) is SummingProtocol
    assert register_protocol(SummingProtocol) is SummingProtocol  # same class twice: no-op
    assert "testsum" in available_protocols(with_dp=False)
    proto = get_protocol("TESTSUM", scale=2.0)
    assert isinstance(proto, SummingProtocol) and proto.scale == 2.0
    # the protocol is real: it sums (scaled by its option)
    schema = SumSchema([BlockSpec("x", (2,))], max_clients=3)
    sums, _ = proto.aggregate(schema, {0: {"x": np.array([0.25, 0.5])}, 1: {"x": np.array([0.25, 0.0])}})
    assert sums["x"].tolist() == [1.0, 1.0]


def test_register_refuses_silent_overwrite() -> None:
    register_protocol(SummingProtocol)
    with pytest.raises(
        ConfigError, match=r"'testsum' is already registered to .*SummingProtocol; pass force=True"
    ):
        register_protocol(OtherProtocol)
    register_protocol(OtherProtocol, force=True)
    assert isinstance(get_protocol("testsum"), OtherProtocol)


def test_register_refuses_builtin_names_without_force() -> None:
    class FakeSecAgg(SummingProtocol):
        name = "SecAgg"

    with pytest.raises(
        ConfigError, match=r"'secagg' is already registered to securefgl.protocols.secagg.SecAgg"
    ):
        register_protocol(FakeSecAgg)
    register_protocol(FakeSecAgg, force=True)
    assert isinstance(get_protocol("secagg"), FakeSecAgg)


@pytest.mark.parametrize(
    ("cls", "match"),
    [
        (int, "Protocol subclass"),
        (type("NoName", (SummingProtocol,), {"name": ""}), "non-empty string class attribute"),
        (type("DpName", (SummingProtocol,), {"name": "mine+dp"}), "reserved DP suffix"),
    ],
)
def test_register_validation(cls: type, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        register_protocol(cls)


def test_bad_options_list_accepted_ones() -> None:
    register_protocol(SummingProtocol)
    with pytest.raises(
        ConfigError, match=r"invalid options for protocol 'testsum'.*accepted options: \['scale'\]"
    ):
        get_protocol("testsum", sigma=3)


def test_dp_options_need_dp_name() -> None:
    register_protocol(SummingProtocol)
    with pytest.raises(ConfigError, match=r"use 'testsum\+dp'"):
        get_protocol("testsum", dp_epsilon=1.0)


def test_dp_suffix_wraps_the_base_protocol() -> None:
    from securefgl.protocols.dp import DistributedDP

    assert "plaintext+dp" in available_protocols()
    with pytest.raises(ConfigError, match="DP wrapper"):
        get_protocol("plaintext+dp", dp={"no_such_option_xyz": 1})
    assert issubclass(DistributedDP, Protocol)


def test_package_exports() -> None:
    for name in ["BlockSpec", "SumSchema", "get_protocol", "available_protocols", "Sums", "Transcript"]:
        assert name in protocols.__all__ and hasattr(protocols, name)
    with pytest.raises(AttributeError):
        protocols.NoSuchThing  # noqa: B018
    ns: dict = {}
    exec("from securefgl.protocols import *", ns)
    assert "SumSchema" in ns


@pytest.mark.parametrize(
    ("name", "base", "dp"),
    [
        ("secagg", "secagg", False),
        ("SecAgg+DP", "secagg", True),
        ("SecAgg_Plus+DP", "secagg+", True),
        ("secagg++dp", "secagg+", True),
        ("ckks_dp", "ckks", True),
        ("plain", "plaintext", False),
    ],
)
def test_protocol_spec_is_the_one_reading_of_a_name(name: str, base: str, dp: bool) -> None:
    from securefgl.protocols import ProtocolSpec, parse_protocol

    spec = parse_protocol(name)
    assert (spec.base, spec.dp) == (base, dp)
    assert spec == normalize_protocol_name(name) and isinstance(spec, str)
    assert ProtocolSpec.of(base, dp=dp) == spec
    assert parse_protocol(spec) is spec


def test_protocol_spec_refuses_a_suffix_given_twice_and_empty_names() -> None:
    from securefgl.protocols import ProtocolSpec

    with pytest.raises(ConfigError, match="dp=True"):
        ProtocolSpec.of("secagg+dp", dp=True)
    with pytest.raises(ConfigError, match="non-empty"):
        ProtocolSpec("  ")
