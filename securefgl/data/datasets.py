"""Known datasets and :func:`load_dataset`, through torch_geometric's own dataset classes.

Every dataset is loaded from a data root (:func:`securefgl.data.data_root`) in the raw/processed layout that
PyG expects, so nothing is downloaded when the raw files are already there. Without the files, PyG's download
is attempted (``download=True``); if it fails (offline, blocked), a
:class:`~securefgl.errors.DatasetNotFoundError` names the dataset, the root, the files expected and
``SECUREFGL_DATA``. Every graph comes out undirected, without self-loops or duplicate edges, with ``x``
float32, ``y`` int64 of shape ``(N,)``, ``num_classes``, the canonical ``name``, and the public split as 1-D
boolean ``train_mask``/``val_mask``/``test_mask`` where the dataset has one (datasets that ship several
splits give split ``split_index``).

============================  ====================  ==========================================================
name                          loaded with           files under the root
============================  ====================  ==========================================================
Cora, CiteSeer, PubMed        ``Planetoid``         ``<Name>/raw/ind.<name>.{x,tx,allx,y,ty,ally,graph,...}``
Computers, Photo              ``Amazon``            ``<Name>/raw/amazon_electronics_<name>.npz``
CS, Physics                   ``Coauthor``          ``<Name>/raw/ms_academic_{cs,phy}.npz``
WikiCS                        ``WikiCS``            ``WikiCS/raw/data.json``
Roman-empire, Amazon-ratings, ``HeterophilousGraph   ``<name>/raw/<name>.npz`` (lower case, ``_`` for ``-``)
Minesweeper, Tolokers,        Dataset``
Questions
Flickr                        ``Flickr``            ``Flickr/raw/{adj_full.npz,feats.npy,class_map.json,role.json}``
Reddit                        ``Reddit``            ``Reddit/raw/{reddit_data.npz,reddit_graph.npz}``
ogbn-arxiv, ogbn-products     ``ogb`` (optional)    ``ogbn_<name>/...`` as ogb lays it out
chameleon, squirrel, actor,   numpy (npz format of  ``heterophily-npz/<name>.npz`` with keys ``node_features``,
cornell, texas, wisconsin,    Platonov et al.)      ``node_labels``, ``edges``, ``{train,val,test}_masks``
chameleon_filtered,
squirrel_filtered
csbm                          :func:`make_csbm`     none (synthetic default)
============================  ====================  ==========================================================
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from securefgl.data.root import ENV_VAR, data_root
from securefgl.errors import ConfigError, DatasetNotFoundError

__all__ = [
    "DatasetInfo",
    "DATASETS",
    "dataset_names",
    "canonical_name",
    "dataset_files",
    "missing_files",
    "unreadable_files",
    "load_dataset",
]


@dataclass(frozen=True)
class DatasetInfo:
    """A known dataset: how it is loaded and which files it needs under the data root.

    Args:
        name: Canonical name.
        family: Loader family (``planetoid``, ``amazon``, ``coauthor``, ``wikics``, ``heterophilous``,
            ``flickr``, ``reddit``, ``ogb``, ``npz``, ``synthetic``).
        files: Files expected under the data root (relative paths).
        public_split: Whether the dataset ships a public train/val/test split.
        requires: An optional Python package the loader needs (``"ogb"``), or ``None``.
    """

    name: str
    family: str
    files: tuple[str, ...]
    public_split: bool
    requires: str | None = None


def _planetoid(name: str) -> DatasetInfo:
    low = name.lower()
    parts = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
    return DatasetInfo(name, "planetoid", tuple(f"{name}/raw/ind.{low}.{p}" for p in parts), True)


def _hetero(name: str) -> DatasetInfo:
    folder = name.lower().replace("-", "_")
    return DatasetInfo(name, "heterophilous", (f"{folder}/raw/{folder}.npz",), True)


def _npz(name: str) -> DatasetInfo:
    return DatasetInfo(name, "npz", (f"heterophily-npz/{name}.npz",), True)


_INFOS: list[DatasetInfo] = [
    _planetoid("Cora"),
    _planetoid("CiteSeer"),
    _planetoid("PubMed"),
    DatasetInfo("Computers", "amazon", ("Computers/raw/amazon_electronics_computers.npz",), False),
    DatasetInfo("Photo", "amazon", ("Photo/raw/amazon_electronics_photo.npz",), False),
    DatasetInfo("CS", "coauthor", ("CS/raw/ms_academic_cs.npz",), False),
    DatasetInfo("Physics", "coauthor", ("Physics/raw/ms_academic_phy.npz",), False),
    DatasetInfo("WikiCS", "wikics", ("WikiCS/raw/data.json",), True),
    _hetero("Roman-empire"),
    _hetero("Amazon-ratings"),
    _hetero("Minesweeper"),
    _hetero("Tolokers"),
    _hetero("Questions"),
    DatasetInfo(
        "Flickr",
        "flickr",
        tuple(f"Flickr/raw/{f}" for f in ("adj_full.npz", "feats.npy", "class_map.json", "role.json")),
        True,
    ),
    DatasetInfo("Reddit", "reddit", ("Reddit/raw/reddit_data.npz", "Reddit/raw/reddit_graph.npz"), True),
    DatasetInfo(
        "ogbn-arxiv",
        "ogb",
        (
            "ogbn_arxiv/raw/edge.csv.gz",
            "ogbn_arxiv/raw/node-feat.csv.gz",
            "ogbn_arxiv/raw/node-label.csv.gz",
            "ogbn_arxiv/split/time/train.csv.gz",
        ),
        True,
        requires="ogb",
    ),
    DatasetInfo(
        "ogbn-products",
        "ogb",
        (
            "ogbn_products/raw/edge.csv.gz",
            "ogbn_products/raw/node-feat.csv.gz",
            "ogbn_products/raw/node-label.csv.gz",
            "ogbn_products/split/sales_ranking/train.csv.gz",
        ),
        True,
        requires="ogb",
    ),
    *(
        _npz(n)
        for n in (
            "chameleon",
            "squirrel",
            "actor",
            "cornell",
            "texas",
            "wisconsin",
            "chameleon_filtered",
            "squirrel_filtered",
        )
    ),
    DatasetInfo("csbm", "synthetic", (), False),
]

#: Canonical name -> :class:`DatasetInfo`, in display order.
DATASETS: dict[str, DatasetInfo] = {info.name: info for info in _INFOS}

_ALIASES = {
    "amazoncomputers": "Computers",
    "amazonphoto": "Photo",
    "coauthorcs": "CS",
    "coauthorphysics": "Physics",
    "arxiv": "ogbn-arxiv",
    "products": "ogbn-products",
    "film": "actor",
    "synthetic": "csbm",
}


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum() or ch == "+")


_LOOKUP: dict[str, str] = {_norm(n): n for n in DATASETS} | {_norm(k): v for k, v in _ALIASES.items()}


def dataset_names() -> list[str]:
    """Canonical names of every known dataset, in display order."""
    return list(DATASETS)


def canonical_name(name: str, *, error: type[Exception] = ConfigError, key: str = "dataset") -> str:
    """Normalise a dataset name (case, ``-``, ``_`` and spaces do not matter; a few aliases are accepted).

    Raises:
        ConfigError: (or ``error``) an unknown name; the message lists the valid choices.
    """
    if not isinstance(name, str) or _norm(name) not in _LOOKUP:
        raise error(f"{key}: unknown dataset {name!r}; valid choices: {', '.join(DATASETS)}")
    return _LOOKUP[_norm(name)]


def dataset_files(name: str, root: str | Path | None = None) -> list[Path]:
    """Absolute paths of the files ``name`` needs under the data root."""
    info = DATASETS[canonical_name(name)]
    base = data_root(root)
    return [base / f for f in info.files]


def missing_files(name: str, root: str | Path | None = None) -> list[Path]:
    """The expected files of ``name`` that are not under the data root (empty when it can load offline).

    For ogb datasets an already processed copy counts as present.
    """
    info = DATASETS[canonical_name(name)]
    base = data_root(root)
    if info.family == "ogb" and (base / info.files[0].split("/")[0] / "processed").is_dir():
        return []
    return [p for p in dataset_files(name, base) if not p.exists()]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


def _not_found(
    info: DatasetInfo, root: Path, reason: str, cause: BaseException | None = None
) -> DatasetNotFoundError:
    """One line: the dataset, the root, why, every file expected, and how to put the files there."""
    expected = ", ".join(str(root / f) for f in info.files)
    folder = info.files[0].split("/")[0] if info.files else info.name
    msg = (
        f"dataset {info.name!r} is not available under the data root {str(root)!r} ({reason}"
        + (f"; download error: {_one_line(cause)}" if cause is not None else "")
        + f"); files expected: {expected}. Copy them in with `securefgl datasets import DIR` (DIR holding "
        f"{folder}/...), or point {ENV_VAR} (or --root) at a writable folder that has them"
    )
    return DatasetNotFoundError(msg)


def _probe(path: Path) -> str | None:
    """Why a raw file cannot be read (``None``: it reads), without trusting its content beyond its format."""
    import gzip
    import json
    import pickle
    import warnings

    if path.is_dir():
        return "is a directory, not a file"
    try:
        name = path.name
        if name.endswith(".npz"):
            with np.load(path, allow_pickle=True) as z:
                for key in z.files:
                    z[key]
        elif name.endswith(".npy"):
            np.load(path, allow_pickle=False)
        elif name.endswith(".json"):
            json.loads(path.read_text(encoding="utf-8"))
        elif name.endswith(".gz"):
            with gzip.open(path) as fh:
                while fh.read(1 << 20):
                    pass
        elif ".test.index" in name:
            [int(line) for line in path.read_text(encoding="utf-8").split()]
        elif "/raw/ind." in path.as_posix():  # Planetoid pickles (scipy matrices, numpy arrays, dicts)
            with path.open("rb") as fh, warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # old scipy module paths inside
                pickle.load(fh, encoding="latin1")
    except Exception as exc:  # any failure to parse is what we report
        return f"cannot be read ({_one_line(exc)})"
    return None


def unreadable_files(name: str, root: str | Path | None = None) -> list[tuple[Path, str]]:
    """The files of ``name`` under ``root`` that exist but cannot be read, each with why (a folder in place of a
    file, a truncated or garbled archive, pickle, JSON or gzip file). Missing files are not listed."""
    info = DATASETS[canonical_name(name)]
    base = data_root(root)
    out = []
    for rel in info.files:
        path = base / rel
        problem = _probe(path) if path.exists() else None
        if problem is not None:
            out.append((path, problem))
    return out


def _unreadable(info: DatasetInfo, root: Path, cause: BaseException) -> DatasetNotFoundError:
    """One line naming the file that breaks ``info``'s loading, and the fix."""
    for rel in info.files:
        path = root / rel
        problem = _probe(path) if path.exists() else None
        if problem is not None:
            return DatasetNotFoundError(
                f"dataset {info.name!r}: {path} {problem}; replace it with an intact copy "
                f"(`securefgl datasets import DIR` copies and checks the raw files)"
            )
    processed = root / info.files[0].split("/")[0] / "processed" if info.files else None
    if processed is not None and processed.is_dir() and any(processed.iterdir()):
        return DatasetNotFoundError(
            f"dataset {info.name!r}: its processed copy {processed} cannot be read ({_one_line(cause)}); "
            f"delete {processed} and retry (it is rebuilt from raw/)"
        )
    return DatasetNotFoundError(
        f"dataset {info.name!r}: its files under {root} cannot be read ({_one_line(cause)}); "
        f"copy them again with `securefgl datasets import DIR`"
    )


def _new_dirs(info: DatasetInfo, base: Path) -> list[Path]:
    """The folders loading ``info`` may create that do not exist yet, deepest first."""
    top = base / info.files[0].split("/")[0] if info.files else base
    candidates = [top / "processed", top / "raw", top, base]
    candidates += [base / Path(f).parent for f in info.files]
    return sorted({d for d in candidates if not d.exists()}, key=lambda d: -len(d.parts))


def _remove_empty(dirs: list[Path]) -> None:
    """Remove the folders of ``dirs`` that are (now) empty, deepest first: a failed load leaves none."""
    for d in dirs:
        with contextlib.suppress(OSError):
            d.rmdir()


def _pick(mask: torch.Tensor | None, split_index: int) -> torch.Tensor | None:
    if mask is None:
        return None
    mask = mask.bool()
    if mask.dim() == 2:
        col = split_index if mask.shape[1] > split_index else 0
        mask = mask[:, col]
    return mask.reshape(-1).clone()


def _finalize(
    name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    edge_index: torch.Tensor,
    masks: tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None] = (None, None, None),
    num_classes: int | None = None,
) -> Data:
    """Undirected, self-loop-free, coalesced graph with the documented attribute dtypes."""
    y = y.reshape(-1).long()
    n = int(y.shape[0])
    edge_index = edge_index.long()
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = to_undirected(edge_index, num_nodes=n)  # coalesces: sorted, no duplicates
    data = Data(x=x.float().contiguous(), y=y, edge_index=edge_index, num_nodes=n)
    for attr, mask in zip(("train_mask", "val_mask", "test_mask"), masks, strict=True):
        if mask is not None:
            data[attr] = mask
    data.num_classes = int(num_classes) if num_classes is not None else int(y.max()) + 1
    data.name = name
    return data


def _load_npz(info: DatasetInfo, root: Path, split_index: int) -> Data:
    with np.load(root / info.files[0]) as z:
        x = torch.from_numpy(np.asarray(z["node_features"], dtype=np.float32))
        y = torch.from_numpy(np.asarray(z["node_labels"], dtype=np.int64))
        edges = torch.from_numpy(np.asarray(z["edges"], dtype=np.int64)).t().contiguous()
        masks = tuple(
            _pick(torch.from_numpy(np.asarray(z[k])).t(), split_index) if k in z.files else None
            for k in ("train_masks", "val_masks", "test_masks")
        )
    return _finalize(info.name, x, y, edges, masks)  # type: ignore[arg-type]


def _load_pyg(info: DatasetInfo, root: Path, split_index: int) -> Data:
    import torch_geometric.datasets as pygd

    constructors: dict[str, Callable[[], object]] = {
        "planetoid": lambda: pygd.Planetoid(str(root), info.name),
        "amazon": lambda: pygd.Amazon(str(root), info.name),
        "coauthor": lambda: pygd.Coauthor(str(root), info.name),
        "wikics": lambda: pygd.WikiCS(str(root / "WikiCS"), is_undirected=True),
        "heterophilous": lambda: pygd.HeterophilousGraphDataset(str(root), info.name),
        "flickr": lambda: pygd.Flickr(str(root / "Flickr")),
        "reddit": lambda: pygd.Reddit(str(root / "Reddit")),
    }
    dataset = constructors[info.family]()
    raw = dataset[0]  # type: ignore[index]
    masks = tuple(_pick(getattr(raw, k, None), split_index) for k in ("train_mask", "val_mask", "test_mask"))
    num_classes = int(getattr(dataset, "num_classes", int(raw.y.max()) + 1))
    return _finalize(info.name, raw.x, raw.y, raw.edge_index, masks, num_classes)  # type: ignore[arg-type]


def _load_ogb(info: DatasetInfo, root: Path) -> Data:
    from ogb.nodeproppred import PygNodePropPredDataset  # type: ignore[import-not-found]

    dataset = PygNodePropPredDataset(name=info.name, root=str(root))
    raw = dataset[0]
    n = int(raw.num_nodes)
    idx = dataset.get_idx_split()
    masks = []
    for key in ("train", "valid", "test"):
        m = torch.zeros(n, dtype=torch.bool)
        m[idx[key]] = True
        masks.append(m)
    return _finalize(info.name, raw.x, raw.y, raw.edge_index, tuple(masks), dataset.num_classes)  # type: ignore[arg-type]


def load_dataset(
    name: str,
    root: str | Path | None = None,
    *,
    download: bool = True,
    split_index: int = 0,
) -> Data:
    """Load a known dataset as one undirected PyG ``Data`` graph.

    Args:
        name: Dataset name (case-insensitive; see :data:`DATASETS`). ``"csbm"`` returns the synthetic default
            (:func:`~securefgl.data.make_csbm` with its defaults).
        root: Data root; ``None`` means ``$SECUREFGL_DATA`` or the user cache directory. (default: ``None``)
        download: When files are missing, let PyG try to download them; ``False`` fails at once.
            (default: ``True``)
        split_index: Which public split to expose for datasets that ship several (heterophilous graphs,
            WikiCS). (default: 0)

    Returns:
        ``Data`` with ``x`` ``(N, F)`` float32, ``y`` ``(N,)`` int64, ``edge_index`` ``(2, E)`` (both
        directions, sorted, no self-loops or duplicates), ``num_classes``, ``name`` and the public split masks
        when the dataset has one.

    Raises:
        ConfigError: Unknown name (the valid choices are listed), or a data root that is not writable.
        DatasetNotFoundError: Files missing and the download impossible or failed; the message names the dataset,
            the root, the files expected and ``SECUREFGL_DATA``. Also a file that cannot be read (truncated,
            garbled, a folder in its place, an unreadable ``processed/`` copy): one line naming the file and the
            fix. A failed load removes the empty folders it created.
    """
    canon = canonical_name(name)
    info = DATASETS[canon]
    if isinstance(split_index, bool) or not isinstance(split_index, int) or split_index < 0:
        raise ConfigError(f"split_index must be a non-negative integer, got {split_index!r}")
    if info.family == "synthetic":
        from securefgl.data.synthetic import make_csbm

        return make_csbm()
    base = data_root(root)
    if info.requires is not None and importlib.util.find_spec(info.requires) is None:
        raise _not_found(
            info,
            base,
            f"the optional package {info.requires!r} is not installed: "
            f"pip install 'securefgl[{info.requires}]'",
        )
    missing = missing_files(canon, base)
    if missing and not download:
        raise _not_found(info, base, f"{len(missing)} file(s) missing and download=False")
    if info.family == "npz":
        if missing:  # no PyG class (and no download) for this format
            raise _not_found(info, base, "file missing; this format is never downloaded")
        try:
            return _load_npz(info, base, split_index)
        except Exception as exc:  # truncated or garbled archive, a folder in its place, missing keys
            raise _unreadable(info, base, exc) from exc
    created = _new_dirs(info, base)
    try:
        return _load_with_pyg(info, base, split_index, missing)
    except BaseException:
        _remove_empty(created)
        raise


def _load_with_pyg(info: DatasetInfo, base: Path, split_index: int, missing: list[Path]) -> Data:
    """Load through PyG (or ogb), turning every failure into one typed error that names the file and fix."""
    try:
        if info.family == "ogb":
            return _load_ogb(info, base)
        return _load_pyg(info, base, split_index)
    except PermissionError as exc:
        raise ConfigError(
            f"data root {str(base)!r} is not writable (PyG writes a processed/ folder next to raw/): {exc}. "
            f"Copy the raw files to a writable directory and point {ENV_VAR} at it."
        ) from exc
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EROFS):
            raise ConfigError(
                f"data root {str(base)!r} is not writable: {exc}. Point {ENV_VAR} at a writable copy."
            ) from exc
        if missing:
            raise _not_found(
                info, base, f"{len(missing)} file(s) missing and the download failed", exc
            ) from exc
        raise _unreadable(info, base, exc) from exc
    except Exception as exc:  # a download failure surfaces as many types (URLError, HTTPError, ...)
        if missing:
            raise _not_found(
                info, base, f"{len(missing)} file(s) missing and the download failed", exc
            ) from exc
        raise _unreadable(info, base, exc) from exc
