"""The built-in names the command line offers, without importing torch.

``securefgl --help`` and a misspelt name must answer in a fraction of a second, while the registries that
hold these names import torch and PyG (seconds). The CLI therefore keeps a copy of the built-in names here;
``tests/cli/test_names.py`` checks that every copy equals its registry, so a new algorithm, protocol, model,
dataset, partition method, preset or attack fails CI until it is listed here too. The full validation still
happens in the registries; :func:`unknown_name` only answers early for a name that is certainly unknown.
"""

from __future__ import annotations

import re

__all__ = ["NAMES", "names", "unknown_name"]

_PROTOCOL_BASES = ("plaintext", "secagg", "secagg+", "ckks")

#: kind -> the built-in names, in the order the registries list them.
NAMES: dict[str, tuple[str, ...]] = {
    "protocol": (*_PROTOCOL_BASES, *(f"{p}+dp" for p in _PROTOCOL_BASES)),
    "algorithm": (
        "adafgl",
        "centralized",
        "fedavg",
        "fedlog",
        "fedprox",
        "fedspray",
        "fedstruct",
        "gap",
        "local",
        "opfgl",
    ),
    "model": ("gat", "gcn", "mlp", "sage", "sgc"),
    "dataset": (
        "Cora",
        "CiteSeer",
        "PubMed",
        "Computers",
        "Photo",
        "CS",
        "Physics",
        "WikiCS",
        "Roman-empire",
        "Amazon-ratings",
        "Minesweeper",
        "Tolokers",
        "Questions",
        "Flickr",
        "Reddit",
        "ogbn-arxiv",
        "ogbn-products",
        "chameleon",
        "squirrel",
        "actor",
        "cornell",
        "texas",
        "wisconsin",
        "chameleon_filtered",
        "squirrel_filtered",
        "csbm",
    ),
    "partition": (
        "random",
        "metis",
        "louvain",
        "louvain+",
        "metis+",
        "dirichlet",
        "structure-noniid",
        "fedlog",
        "kmeans",
        "file",
    ),
    "preset": ("fedspray-code", "fedspray-paper", "opfgl-paper"),
    "attack": (
        "gradient-inversion",
        "label",
        "link-stealing",
        "structure-inference",
        "membership",
        "statistics",
        "differencing",
        "model-inconsistency",
        "min-cohort",
        "disaggregation",
        "malicious-model",
        "analytic-inversion",
    ),
    "bench-section": ("protocols", "unmasking", "ckks", "ckks-bytes", "dp"),
}

#: Spellings the registries accept besides the names (normalised as :func:`_key` does).
_ALIASES: dict[str, tuple[str, ...]] = {
    "protocol": ("plain", "secaggp", "bonawitz", "he"),
    "model": ("graphsage",),
    "dataset": (
        "amazoncomputers",
        "amazonphoto",
        "coauthorcs",
        "coauthorphysics",
        "arxiv",
        "products",
        "film",
        "synthetic",
    ),
}

_DP_SUFFIX = re.compile(r"^(?P<base>.*?)[\s_\-+]?dp$")


def _key(kind: str, name: str) -> str:
    """A loose normal form: lower case, no separators; a protocol also loses its DP suffix."""
    s = name.strip().lower()
    if kind == "protocol":
        m = _DP_SUFFIX.match(s)
        s = (m.group("base") if m else s).replace("plus", "+")
    return re.sub(r"[^0-9a-z+]", "", s)


def names(kind: str) -> str:
    """The built-in names of ``kind`` as a comma-separated list (for help texts and errors)."""
    return ", ".join(NAMES[kind])


def unknown_name(kind: str, name: str) -> str | None:
    """An error message when ``name`` is certainly not a built-in ``kind``; ``None`` when it may be one.

    Args:
        kind: ``protocol``, ``algorithm``, ``model``, ``dataset``, ``partition``, ``preset``, ``attack`` or ``bench-section``.
        name: The name as the user typed it.
    """
    pool = NAMES[kind] if kind != "protocol" else _PROTOCOL_BASES
    known = {_key(kind, n) for n in pool} | {_key(kind, a) for a in _ALIASES.get(kind, ())}
    if _key(kind, name) in known:
        return None
    return f"unknown {kind} {name!r}; valid choices: {names(kind)}"
