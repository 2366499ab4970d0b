"""The CLI's copy of the built-in names (kept so that ``--help`` imports no torch) equals the registries."""

from __future__ import annotations

import pytest

from securefgl.cli._names import NAMES, unknown_name


def _registry(kind: str) -> list[str]:
    if kind == "protocol":
        from securefgl.protocols.registry import available_protocols

        return available_protocols()
    if kind == "algorithm":
        from securefgl.algorithms.registry import available_algorithms, get_algorithm

        # built-in ones only: other tests register their own algorithms into the same process
        return [n for n in available_algorithms() if get_algorithm(n).__module__.startswith("securefgl.")]
    if kind == "model":
        from securefgl.nn.registry import available_models

        return available_models()
    if kind == "dataset":
        from securefgl.data import dataset_names

        return dataset_names()
    if kind == "partition":
        from securefgl.data import partition_methods

        return list(partition_methods())
    if kind == "preset":
        from securefgl.algorithms.presets import preset_names

        return preset_names()
    if kind == "attack":
        from securefgl.attacks.audit import ATTACKS

        return list(ATTACKS)
    from securefgl.benchmarking import available_sections

    return available_sections()


@pytest.mark.parametrize("kind", sorted(NAMES))
def test_names_match_the_registries(kind: str) -> None:
    assert list(NAMES[kind]) == _registry(kind), f"update securefgl/cli/_names.py for {kind}"


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("protocol", "SecAgg"),
        ("protocol", "secagg_plus_dp"),
        ("protocol", "secagg++dp"),
        ("protocol", "bonawitz"),
        ("dataset", "roman_empire"),
        ("dataset", "amazon-computers"),
        ("model", "GraphSAGE"),
        ("algorithm", "FedAvg"),
        ("partition", "structure_noniid"),
    ],
)
def test_spellings_the_registries_accept_are_not_refused_early(kind: str, name: str) -> None:
    assert unknown_name(kind, name) is None


def test_an_unknown_name_lists_the_valid_ones() -> None:
    msg = unknown_name("protocol", "secgg")
    assert msg is not None and "'secgg'" in msg and "secagg+dp" in msg
    assert unknown_name("dataset", "Coraa") is not None
