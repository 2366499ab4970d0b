"""The typed config machinery (securefgl.config) and the data-side sections."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import tomllib
from typing import Any, Literal

import pytest

from securefgl.config import (
    DataConfig,
    DatasetConfig,
    PartitionConfig,
    build,
    dumps_toml,
    load_config,
    load_mapping,
    parse_overrides,
    replace,
    save_config,
    to_dict,
)
from securefgl.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Inner:
    lr: float = 0.1
    mode: Literal["a", "b"] = "a"


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    rounds: int = 3
    flag: bool = False
    dims: tuple[int, ...] = (16, 16)
    pair: tuple[float, str] = (1.0, "x")
    maybe: int | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    inner: Inner = dataclasses.field(default_factory=Inner)


def test_build_validates_and_converts() -> None:
    cfg = build(
        Outer, {"name": "n", "rounds": 5, "dims": [8, 4], "pair": [2, "y"], "inner": {"lr": 1, "mode": "b"}}
    )
    assert cfg == Outer(name="n", rounds=5, dims=(8, 4), pair=(2.0, "y"), inner=Inner(lr=1.0, mode="b"))
    assert isinstance(cfg.inner.lr, float)
    assert build(Outer, {"name": "n", "maybe": "none"}).maybe is None
    assert build(Outer, {"name": "n", "extra": {"k": [1, {"z": 2}]}}).extra == {"k": [1, {"z": 2}]}


@pytest.mark.parametrize(
    ("mapping", "needle"),
    [
        ({"name": "n", "rounds": "3"}, "rounds: expected an integer"),
        ({"name": "n", "rounds": 2.5}, "rounds: expected an integer"),
        ({"name": "n", "rounds": True}, "rounds: expected an integer"),
        ({"name": "n", "flag": "yes"}, "flag: expected a boolean"),
        ({"name": "n", "inner": {"mode": "c"}}, "inner.mode: invalid value 'c'; valid choices: 'a', 'b'"),
        ({"name": "n", "inner": {"lx": 1}}, "unknown key 'inner.lx'; valid keys in 'inner': lr, mode"),
        ({"name": "n", "roundz": 1}, "unknown key 'roundz'; valid keys: name, rounds"),
        ({"name": "n", "pair": [1.0]}, "pair: expected a list of 2 values"),
        ({"name": "n", "dims": [1, "a"]}, "dims[1]: expected an integer"),
        ({}, "missing required key 'name'"),
    ],
)
def test_build_rejects_with_key_and_choices(mapping: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(Outer, mapping)
    assert needle in str(info.value)


def test_overrides_parse_toml_literals() -> None:
    got = parse_overrides(["a.b=3", "a.c=0.5", "a.d=[0.1, 0.2]", "e=Cora", "f=true", "g.h.i='s'"])
    assert got == {"a": {"b": 3, "c": 0.5, "d": [0.1, 0.2]}, "e": "Cora", "f": True, "g": {"h": {"i": "s"}}}
    with pytest.raises(ConfigError, match="key.sub=value"):
        parse_overrides(["novalue"])


def test_toml_roundtrip_and_save(tmp_path) -> None:
    cfg = build(
        DataConfig,
        {"dataset": {"name": "cora"}, "partition": {"method": "dirichlet", "params": {"alpha": 0.1}}},
    )
    assert cfg.dataset.name == "Cora"
    text = dumps_toml(to_dict(cfg))
    assert build(DataConfig, tomllib.loads(text)) == cfg
    path = save_config(cfg, tmp_path)
    assert path.name == "config.toml"
    assert load_config(DataConfig, path) == cfg
    jpath = save_config(cfg, tmp_path / "resolved.json")
    assert json.loads(jpath.read_text())["partition"]["params"] == {"alpha": 0.1}
    assert load_config(PartitionConfig, jpath, section="partition") == cfg.partition


def test_load_config_file_then_overrides(tmp_path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[partition]\nmethod = "metis"\nclients = 4\nsplit = "public"\n')
    cfg = load_config(DataConfig, f, ["partition.clients=6", "dataset.name=CiteSeer"])
    assert (cfg.partition.method, cfg.partition.clients, cfg.partition.split) == ("metis", 6, "public")
    assert cfg.dataset.name == "CiteSeer"
    assert replace(cfg, ["partition.seed=4"]).partition.seed == 4
    bad = tmp_path / "bad.toml"
    bad.write_text("[partition\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_mapping(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_mapping(tmp_path / "nope.toml")
    ini = tmp_path / "c.ini"
    ini.write_text("")
    with pytest.raises(ConfigError, match="unknown format"):
        load_mapping(ini)


def test_yaml_needs_pyyaml(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("partition:\n  clients: 3\n")
    if importlib.util.find_spec("yaml") is None:
        with pytest.raises(ConfigError, match="PyYAML"):
            load_config(DataConfig, f)
    else:
        assert load_config(DataConfig, f).partition.clients == 3


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ({"partition": {"method": "spectral"}}, "valid choices: random, metis, louvain, louvain+"),
        ({"partition": {"seed": 0.5}}, "partition.seed: expected an integer"),
        ({"partition": {"split": [0.6, 0.3, 0.2]}}, "sum to 1.1 > 1"),
        ({"partition": {"split": "private"}}, "partition.split: invalid value 'private'"),
        ({"partition": {"clients": 0}}, "partition.clients must be at least 1"),
        (
            {"partition": {"method": "dirichlet", "params": {"beta": 1}}},
            "valid keys in 'partition.params': alpha",
        ),
        ({"dataset": {"name": "Cor"}}, "dataset.name: unknown dataset 'Cor'; valid choices: Cora"),
        ({"dataset": {"csbm": {"num_classes": 1}}}, "num_classes must be at least 2"),
    ],
)
def test_data_sections_reject_bad_values(section: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(DataConfig, section)
    assert needle in str(info.value)


def test_dataset_config_loads_synthetic() -> None:
    data = build(DatasetConfig, {"csbm": {"num_nodes": 200, "num_classes": 4, "seed": 2}}).load()
    assert data.num_nodes == 200 and data.num_classes == 4
