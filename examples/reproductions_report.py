"""Collect the reproduction scripts' saved results and write ``REPRODUCTIONS.md`` (issue 25).

The page answers "does securefgl reproduce paper X?" for the five seed papers. Its figures are never typed by
hand: each table is computed here from result files that the reproduction scripts wrote (``--out``), which
``collect`` copies into ``reproductions/<paper>/<name>.json`` together with the command that produced them and
the machine it ran on. Where a paper has no saved result yet, the page quotes the figures of the script's own
docstring (marked as such, with the command to re-measure them into a saved result).

Two verbs::

    # 1. after a run: file the script's --out files (several seeds may come from parallel processes)
    python examples/reproductions_report.py collect --paper adafgl --name chameleon_louvain_exact_602020 \\
        --title "Chameleon, Louvain, exact replay, 60/20/20" --machine "H100 host, 16 CPU cores, CPU runs" \\
        --command "python examples/reproduce_adafgl.py ..." results/L6020_s*.json
    #    reproduce_fedstruct.py: its --out file, or its log (one JSON line per seed) when a run was cut short
    python examples/reproductions_report.py collect --paper fedstruct --name cora ... fedstruct_cora.log
    #    reproduce_fedspray.py table: its <--out>/table.json (every setting's seeds, with per-round series)
    python examples/reproductions_report.py collect --paper fedspray --name table_ours ... results/table.json
    #    reproduce_opfgl.py: its --out files (one per invocation, e.g. one seed each; runs merge by their label)
    python examples/reproductions_report.py collect --paper opfgl --name cora_louvain ... results/opfgl_*.json

    # 2. the page
    python examples/reproductions_report.py render            # writes REPRODUCTIONS.md
    python examples/reproductions_report.py render --check    # exit 1 if REPRODUCTIONS.md is out of date

Nothing here runs a model; ``render`` reads JSON only, so it is cheap and tested.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from scipy.stats import t as student_t

from securefgl.experiments.claims import CLAIM_SEEN_TOLERANCE, all_claim_verdicts

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "reproductions"
PAGE = ROOT / "REPRODUCTIONS.md"

#: The papers in page order: title, script, and where its docstring's measured figures are (start, end markers).
PAPERS: dict[str, dict[str, Any]] = {
    "opfgl": {
        "title": "O-pFGL (Cora / CiteSeer, louvain+ and metis+, 10 clients)",
        "script": "examples/reproduce_opfgl.py",
        "docstring": ("The paper's own partitions", None),
        "quote_label": "Figures with the FedAvg and Standalone baselines (earlier runs on O-pFGL's own partitions, "
        "not saved results)",
    },
    "fedspray": {
        "title": "FedSpray (O-pFGL's third-party table; FedSpray's minority-node claim)",
        "script": "examples/reproduce_fedspray.py",
        "docstring": ("``--partition-dir`` reads", "FedSpray runs with"),
        "quote_label": "Figures on O-pFGL's own partitions (the `--partition-dir` runs, saved in the table above)",
    },
    "fedstruct": {
        "title": "FedStruct (Table 5, random partition, 10 clients)",
        "script": "examples/reproduce_fedstruct.py",
        "docstring": ("Targets (Table 5", None),
    },
    "adafgl": {
        "title": "AdaFGL (Table II, 10 clients)",
        "script": "examples/reproduce_adafgl.py",
        "docstring": ("Step 2 starts from", "Progress (rounds done"),
    },
    "fedlog": {
        "title": "FedLoG (O-pFGL's third-party table; FedLoG's generalisation claim)",
        "script": "examples/reproduce_fedlog.py",
        "docstring": ("``--partition-dir`` reads O-pFGL's", "Torch runs single-threaded"),
    },
}

#: AdaFGL Table II, the AdaFGL rows of II-a (Louvain) and II-b (structure non-iid).
ADAFGL_PAPER = {
    ("cora", "louvain"): (82.9, 0.5),
    ("cora", "structure-noniid"): (80.4, 0.8),
    ("citeseer", "louvain"): (72.5, 0.6),
    ("citeseer", "structure-noniid"): (69.3, 0.8),
    ("chameleon", "louvain"): (68.9, 2.1),
    ("chameleon", "structure-noniid"): (70.8, 2.2),
    ("squirrel", "louvain"): (56.1, 1.5),
    ("squirrel", "structure-noniid"): (60.4, 1.7),
    ("actor", "louvain"): (35.9, 1.5),
    ("actor", "structure-noniid"): (42.7, 1.3),
}
#: FedStruct Table 5, FedStruct (H2V) row.
FEDSTRUCT_PAPER = {"cora": (80.28, 1.44), "citeseer": (66.29, 0.87), "chameleon": (52.36, 2.63)}


def script_constant(script: str, name: str) -> Any:
    """A literal module-level constant of a reproduction script (its paper targets), read without importing it."""
    tree = ast.parse((ROOT / script).read_text())
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{script} has no literal constant {name}")


#: O-pFGL Tables 9/10, FedSpray rows, {(dataset, partition): (acc, std, f1, std)}: the script's own targets.
FEDSPRAY_PAPER: dict[tuple[str, str], tuple[float, float, float, float]] = script_constant(
    "examples/reproduce_fedspray.py", "TARGETS"
)
#: O-pFGL Tables 9/10, FedLoG rows, {(dataset, partition): (acc, std)}: the script's own targets.
FEDLOG_PAPER: dict[tuple[str, str], tuple[float, float]] = script_constant(
    "examples/reproduce_fedlog.py", "TARGETS"
)
#: O-pFGL Tables 1/6 and 9/10, {(dataset, partition): {method: (acc, std, f1, std)}}: the script's own targets.
OPFGL_PAPER: dict[tuple[str, str], dict[str, tuple[float, float, float, float]]] = script_constant(
    "examples/reproduce_opfgl.py", "PAPER"
)
#: FedSpray round-selection rules (reproduce_fedspray.py ``select``); the first is the table's.
FEDSPRAY_RULES = ("val_loss", "val_acc", "last")
#: The bar of issue 25: a cell is reached when the mean is within this many points of the paper's.
TOLERANCE = 2.5

#: Measured reasons for what is not reached, one or two sentences each, keyed by paper (prose, not figures:
#: every number they cite is in a table of the same section).
NOTES: dict[str, list[str]] = {
    "opfgl": [
        "Saved: the four O-pFGL cells of the table, on O-pFGL's own partitions (the targets' partitions, replayed "
        "by `examples/opfgl_reference_partition.py` in a separate python-louvain + scikit-learn 1.2 environment), "
        "seeds 0-2, secagg and plaintext. The FedAvg and Standalone baselines were not run for this page "
        "(`--fedavg-rounds 0`); their figures are the docstring's, quoted below.",
    ],
    "fedspray": [
        "On O-pFGL's own partitions (the rows marked reference replay; the targets' partitions, rebuilt by "
        "`examples/opfgl_reference_partition.py` in a separate python-louvain + scikit-learn 1.2 environment) all "
        "four cells are within the bar; on this repository's own louvain+ / metis+ draws CiteSeer louvain+ and "
        "Cora metis+ fall short by 2.8 and 2.7 points, so their gap there is the partition draw.",
        "Run times are wall-clock seconds on a 2-core machine shared with other jobs, so they overstate the cost.",
        "The minority-node claim (`claim`, table above) is measured on Cora and CiteSeer only: the paper's datasets "
        "(PubMed, WikiCS, Physics, Flickr) were not available offline (see `shared/datasets/README.md`). There it "
        "holds against Local (FedSpray +1.4 to +12.2 points on minority nodes) but not against FedAvg, which is "
        "better on minority nodes (Cora by 7.8-9.0 points, CiteSeer by 0.8-1.7) and on all test nodes, at both "
        "selection rules; the paper's gains are on other, larger graphs.",
    ],
    "fedstruct": [
        "The Cora run on the GPU host was cut at the call's time limit (about 3 min per Cora seed on one core), so "
        "only the seeds listed were saved; CiteSeer and Chameleon were saved for seeds 0-2 on a 2-core machine. "
        "The docstring's 10-seed CPU figures, with plaintext and the FL/Local GNN baselines, are quoted below.",
    ],
    "adafgl": [
        "Chameleon Louvain is not reached on any split, even on the exact replay of the reference partition (Geom-GCN's "
        "raw edge order): the edge order changes the partition (137 duplicated node copies instead of 214) but not "
        "the verdict, and the reference's duplicate-weighted accuracy still leaves it more than 4 points short.",
        "Which split: on Louvain the three splits give figures within about 2.5 points of each other, all short; on "
        "structure non-iid Table I's 60/20/20 overshoots the paper (see the table) while the official code's "
        "20/40/40 (issue 27's rows, seeds 0-9: 68.8) lands within 2.5, so the published Chameleon numbers are consistent with the "
        "code's 20/40/40 per-client split, not with the 60/20/20 the paper states.",
        "Issue 27 (heterophilous columns): row-normalising the features (the paper's preprocessing) lowers AdaFGL "
        "on Chameleon and Squirrel, so it is not the cause.",
        "Issue 27, the blend (AdaFGL option blend=select, one secure sum of per-weight validation counts): in the "
        "paired table, with the default extractor (the best-validation step-1 round, as the official code), "
        "blend − FedAvg-GCN is above 0, or its 95 % interval contains 0, on every heterophilous cell at Table I's "
        "split and on five of six at the code's 20/40/40 (Actor structure non-iid is 0.6 below); the paper's "
        "prediction alone (eq. 17) is below FedAvg-GCN, interval and all, on Squirrel Louvain and Actor structure "
        "non-iid at both splits and on Chameleon Louvain at 20/40/40.",
        'Issue 27, step 2 from the last step-1 round (AdaFGL option extractor="last", the rows marked '
        "extractor=last): FedAvg-GCN's column is its last round, while the default starts step 2 from the round "
        "with the best validation accuracy, which on a noisy validation curve can be worse on test (Actor "
        "structure non-iid at 20/40/40: 43.0 against the last round's 43.8), so that even the blend's weight 1 "
        "cannot reach the column. With extractor=last the weight 1 is exactly FedAvg-GCN's last round. On the "
        "eleven cells run with it (ten seeds each), blend − FedAvg-GCN is above "
        "0, or its 95 % interval contains 0, on ten, the cell the default fails included (Actor structure "
        "non-iid, 20/40/40: -0.6 [-1.0, -0.1] becomes +0.3 [-0.3, +0.8]). On Actor structure non-iid at "
        "60/20/20 it is -0.3 [-0.6, -0.0]: the blend picks the weight 0.5 on every seed from the validation "
        "counts, while the weight 1 (FedAvg-GCN itself) is 0.3 better on test, so the selection on validation "
        "costs what it gains elsewhere (the default's figure there, on the earlier install: +0.1 [-0.5, +0.7]). "
        "Actor Louvain at 20/40/40 ran with it only together with blend_holdout and blend_alpha (next note). Within "
        "one install step 1 does not depend on "
        "the option "
        "(FedAvg-GCN equal to the bit, seed by seed, to the default runs of the same install: Actor structure "
        "non-iid 20/40/40, seeds 0-9; Chameleon Louvain 60/20/20, seed 0), and plaintext equals secagg to the "
        "bit (Chameleon Louvain, 60/20/20, seed 0). All but Actor structure non-iid ran on the fresh install of "
        "2026-12-01 (see the introduction): their differences are paired within their own runs, and their "
        "blend − Local column pairs them with Local runs of the earlier install.",
        "Issue 27, the blend's own bias (AdaFGL options blend_holdout=0.5 and blend_alpha=0.05 with extractor=last, the rows marked so): every blend weight but the extractor's is kept at its own best epoch, which each client picks on its ~150 validation nodes, and the same nodes then count the weight. On Actor structure non-iid at 60/20/20 (seed 0) the weight 0.5 gets 760 of the 1,498 validation nodes right against the extractor's 688 (+4.8 points) and is 0.5 points worse on test; a test on those counts (blend_alpha alone) keeps 0.5 (McNemar z = 4.5). Held out of the epoch choice (blend_holdout=0.5), half of each client's validation nodes count the weights level (351 right for the paper's weight 0, 347 for 0.5, 346 for the extractor, of 751). With both options, blend_alpha keeping the extractor unless a weight beats it on those nodes (one-sided McNemar, Bonferroni over the four other weights: z = 2.24), blend − FedAvg-GCN is above 0, or its 95 % interval contains 0, on all twelve heterophilous cells (ten seeds each): Table I's 60/20/20: Squirrel Louvain 43.8 / 42.8 (+1.0 [+0.1, +1.9]; the extractor on 6 of 10 seeds), Squirrel structure non-iid 66.7 / 64.4 (+2.3 [+0.7, +3.8]; the extractor on 4 of 10 seeds), Actor Louvain 29.9 / 29.3 (+0.6 [-0.1, +1.3]; the extractor on 7 of 10 seeds), Actor structure non-iid 48.1 / 48.0 (+0.1 [-0.1, +0.3]; the extractor on 9 of 10 seeds), Chameleon Louvain 62.4 / 62.4 (+0.0 [+0.0, +0.0]; the extractor on 10 of 10 seeds), Chameleon structure non-iid 73.1 / 72.3 (+0.8 [+0.0, +1.6]; the extractor on 4 of 10 seeds); the code's 20/40/40: Squirrel Louvain 38.0 / 37.6 (+0.4 [-0.0, +0.9]; the extractor on 5 of 10 seeds), Squirrel structure non-iid 60.3 / 58.2 (+2.1 [+0.5, +3.7]; the extractor on 5 of 10 seeds), Actor Louvain 26.5 / 26.1 (+0.4 [-0.1, +1.0]; the extractor on 6 of 10 seeds), Actor structure non-iid 43.6 / 43.7 (-0.1 [-0.3, +0.1]; the extractor on 9 of 10 seeds), Chameleon Louvain 53.7 / 53.6 (+0.1 [-0.1, +0.3]; the extractor on 9 of 10 seeds), Chameleon structure non-iid 67.9 / 67.9 (+0.0 [+0.0, +0.0]; the extractor on 10 of 10 seeds). The price is the gain that the held-out half cannot confirm: on Chameleon Louvain at 60/20/20 (220 held-out nodes) the extractor is kept on every seed, where the plain blend was +1.1 [+0.3, +1.9]; Actor Louvain at 60/20/20 keeps +0.6 of +2.5, Squirrel Louvain at 60/20/20 +1.0 of +1.7.",
        "Issue 27, why Squirrel and Chameleon Louvain are not reached: the paper's figures are those of a model "
        "that sees every edge. A centralised GCN on the whole graph (its column) lands at the paper's Chameleon "
        "figure and under its Squirrel figure; in the federation Louvain cuts the cross-client edges and every "
        "method run here (FedAvg-GCN, Local, AdaFGL with or without the blend) ends 7-12 points under that "
        "centralised GCN. AdaFGL given the whole graph as one client (the 1-client rows, no federation at all) "
        "stays more than 4 points under the paper on Squirrel, and with eq. 17 under it on Chameleon: the method "
        "as specified does not reach the published Louvain figures even without the partition.",
        "Issue 27, structure non-iid: with the text's injection (floor(0.5 |E_i|) new edges per client), Table I's "
        "60/20/20 overshoots the paper on all three datasets, and the official code's 20/40/40 lands within 4 "
        "points on all three (the paired table); the code's own injection (0.001 of the eligible pairs) "
        "undershoots on all three. The published structure non-iid figures are consistent with the text's "
        "injection and the code's split.",
        "Issue 27, Actor Louvain is within 4 points at Table I's 60/20/20 (the split the paper states), not at the "
        "code's 20/40/40, where every method run here is under 30. It is not reached for the same kind of reason "
        "as Squirrel: a centralised GCN on the whole graph (its column, 30.3 at 60/20/20) is 5.6 points under the "
        "paper's 35.9, and the federated methods are within a point of it (AdaFGL + blend 29.9, FedAvg-GCN 29.3).",
    ],
    "fedlog": [
        "The generalisation claim is measured not to hold: on Cora (the claim table above, seeds 0-2 saved) FedLoG "
        "beats Local on Missing Class and New Client everywhere, and its Seen Graph is 1.8-2.1 points below "
        "FedAvg's local models at every K. Against those local models (the paper's FedAvg) it wins Missing Class "
        "at K = 5 and 10 and New Client at K = 3 and 5 (both at K = 5, where only the Seen Graph fails the claim), "
        "and loses New Client at K = 10 by 20 points; against FedAvg's aggregated model it loses both everywhere. CiteSeer's claim runs "
        "(the docstring's figures below, same verdict) were not re-run into saved results: a CiteSeer FedLoG run "
        "takes 2-3 times a Cora one.",
        "The w/o-prompt-generator ablation (`fedlog-nopg`, seed 0 only, against the baselines' three seeds) has "
        "much lower Missing Class at K = 5 and 10 (32.6 and 18.5 against FedLoG's seed-0 59.2 and 57.9) but not "
        "at K = 3 (57.8 against 45.5), where the prompt generators do not help.",
        "CiteSeer louvain+ overshoots the paper by 2.7 points with seeds 0-2 (64.26, 65.18, 62.21): the seeds "
        "spread over 3 points where the paper's three runs have a std of 0.33, and seed 2 alone is 1.0 above "
        "it; the cause of the paper's lower, tighter figure is not isolated (the other three cells, same code "
        "and settings, are within the bar).",
        "Plaintext equals secagg to the bit (issue 25's check, Cora metis+, seed 0: 76.34 under both, best round 38 "
        "under both; the uploads are grid-rounded). It ran on the install of 2026-12-01, where the table's "
        "secagg seed 0 (76.17, the earlier install) comes out at 76.34: the difference is the libraries' (see "
        "the introduction), not the protocol's.",
    ],
}


# ----------------------------------------------------------------------------------------------------------
# statistics
# ----------------------------------------------------------------------------------------------------------


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample std (ddof = 1; 0 for one value); NaN for none."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def pm(values: Sequence[float], digits: int = 1) -> str:
    m, s = mean_std(values)
    return "-" if math.isnan(m) else f"{m:.{digits}f} ± {s:.{digits}f}"


# ----------------------------------------------------------------------------------------------------------
# collect
# ----------------------------------------------------------------------------------------------------------


def _adafgl_options(items: Sequence[str]) -> dict[str, Any]:
    """The AdaFGL options of a run's ``--option KEY=VALUE`` list, less ``blend`` (it adds a column and changes
    no other figure): a cell written before the script saved its ``options`` gets them from here."""
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = json.loads(value)
    out.pop("blend", None)
    return out


def read_adafgl(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Merge reproduce_adafgl.py ``--out`` files: cells keyed by their settings, runs concatenated by seed.

    A record that ``collect`` wrote earlier (``reproductions/adafgl/<name>.json``) is read the same way, so
    later seeds can be filed into it. Structure non-iid cells saved before the script had ``--injection`` ran
    the text's injection, the only one it had then, and are keyed as such. Runs of ``--baselines-only`` add
    their columns (Local, centralised GCN) to the run of the same cell, protocol and seed. A cell without
    ``num_clients`` has as many clients as its per-client table has rows; a saved record older than the key
    ran 10, as every AdaFGL cell did then. Cells run with AdaFGL options (``--option``, e.g.
    ``extractor="last"``) carry them as ``options`` and are kept apart from the defaults' cells.
    """
    cells: dict[str, dict[str, Any]] = {}
    extra: list[tuple[str, Path, dict[str, Any]]] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        default_device = data.get("args", {}).get("device", "cpu")
        default_options = _adafgl_options(data.get("args", {}).get("option") or [])
        # a run cut short: its finished cells, and the runs done of the cell it was in (``partial``)
        for cell in [*data.get("cells", []), *([data["partial"]] if "partial" in data else [])]:
            meta = {k: v for k, v in cell.items() if k not in ("clients", "runs", "device")}
            if meta["split"] == "structure-noniid":
                meta.setdefault("injection", "text")
            meta.setdefault("num_clients", len(cell.get("clients") or []) or 10)
            if "options" not in meta and default_options:
                meta["options"] = default_options
            device = cell.get("device", default_device)
            key = json.dumps({**meta, "device": device}, sort_keys=True)
            merged = cells.setdefault(key, {**meta, "device": device, "runs": []})
            seen = {(r["protocol"], r["seed"]) for r in merged["runs"]}
            runs = [r for r in cell["runs"] if not r.get("baselines_only")]
            extra += [(key, Path(path), r) for r in cell["runs"] if r.get("baselines_only")]
            dup = [r for r in runs if (r["protocol"], r["seed"]) in seen]
            if dup:
                raise SystemExit(
                    f"collect: {path} repeats {cell['dataset']} {cell['split']} "
                    f"{dup[0]['protocol']} seed {dup[0]['seed']}, already read from an earlier file"
                )
            merged["runs"].extend(runs)
    for key, path, run in extra:
        cell = cells[key]
        target = next(
            (r for r in cell["runs"] if (r["protocol"], r["seed"]) == (run["protocol"], run["seed"])), None
        )
        if target is None:
            raise SystemExit(
                f"collect: {path} has baselines for {cell['dataset']} {cell['split']} {run['protocol']} seed "
                f"{run['seed']}, but no file read has that run"
            )
        for name in ("local_test_acc", "centralized_test_acc"):
            if name in run and target.setdefault(name, run[name]) != run[name]:
                raise SystemExit(
                    f"collect: {path} gives {name} {run[name]} for {cell['dataset']} {cell['split']} seed "
                    f"{run['seed']}, the saved run has {target[name]}"
                )
    out = list(cells.values())
    for cell in out:
        cell["runs"].sort(key=lambda r: (r["protocol"], r["seed"]))
        for r in cell["runs"]:
            r.pop("per_client", None)
            r.pop("phase_seconds", None)
    return out


def read_fedstruct(paths: Iterable[Path]) -> dict[str, list[dict[str, Any]]]:
    """reproduce_fedstruct.py results: its ``--out`` file, or the JSON lines of its log (one per finished seed)."""
    results: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        text = Path(path).read_text()
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            for method, rows in data.get("results", data).items():
                results.setdefault(method, []).extend(rows)
            continue
        for line in text.splitlines():
            if line.startswith("{") and '"method"' in line:
                row = json.loads(line)
                results.setdefault(row.pop("method"), []).append(row)
    for rows in results.values():
        rows.sort(key=lambda r: r["seed"])
    return results


def _select(series: dict[str, list[float]], rule: str) -> dict[str, float]:
    """Test metrics (%) at the round ``rule`` picks, as reproduce_fedspray.py ``select`` (NaNs skipped, first on
    ties): ``val_loss`` lowest validation loss, ``val_acc`` best validation accuracy, ``last`` the last round."""
    n = len(series["test_acc"])
    if rule == "last":
        i = n - 1
    else:
        vals = [(v, j) for j, v in enumerate(series[rule]) if not math.isnan(v)]
        i = min(vals)[1] if rule == "val_loss" else min((-v, j) for v, j in vals)[1]
    out = {k: 100 * series[k][i] for k in ("test_acc", "test_f1", "test_minority_acc") if k in series}
    return out | {"round": i}


#: The methods of reproduce_fedspray.py ``claim`` (the third field of its keys, where ``table`` has the protocol).
FEDSPRAY_CLAIM_METHODS = ("fedspray", "fedavg", "local")


def _fedspray_cell(key: str) -> dict[str, Any]:
    """A cell's settings from its key: ``table``'s ``dataset|partition|protocol|preset|rounds[|ref]`` or
    ``claim``'s ``dataset|partition|method|protocol|preset|rounds`` (a claim cell carries ``method``)."""
    fields = key.split("|")
    cell: dict[str, Any] = {"dataset": fields[0], "partition": fields[1]}
    if fields[2] in FEDSPRAY_CLAIM_METHODS:
        cell["method"] = fields[2]
        fields = fields[:2] + fields[3:]
    proto, preset, rounds, *ref = fields[2:]
    return cell | {
        "protocol": proto,
        "preset": preset,
        "rounds": int(rounds),
        "reference_partition": bool(ref),
        "runs": [],
    }


def read_fedspray(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """reproduce_fedspray.py ``table.json`` and ``claim.json`` files: one cell per setting key (see
    :func:`_fedspray_cell`), each seed reduced to its selected rounds and times."""
    cells: dict[str, dict[str, Any]] = {}
    for path in paths:
        for key, rows in json.loads(Path(path).read_text()).items():
            if key.startswith("_"):  # ``_libraries``: read by read_libraries
                continue
            cell = cells.setdefault(key, _fedspray_cell(key))
            seen = {r["seed"] for r in cell["runs"]}
            for row in rows:
                if row["seed"] in seen:
                    continue
                cell["runs"].append(
                    {
                        "seed": row["seed"],
                        "seconds": row["seconds"],
                        "train_seconds": row.get("train_seconds"),
                        "crypto_seconds": row.get("crypto_seconds"),
                        "select": {rule: _select(row["series"], rule) for rule in FEDSPRAY_RULES},
                    }
                )
    out = sorted(
        cells.values(),
        key=lambda c: (c["partition"], c["dataset"], c["protocol"] != "secagg", c.get("method", "")),
    )
    for cell in out:
        cell["runs"].sort(key=lambda r: r["seed"])
    return out


def read_opfgl(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """reproduce_opfgl.py ``--out`` files: one cell per run label (``dataset/partition/p<seed>/method/protocol``,
    ``dataset/partition/fedavg/protocol`` or ``.../standalone``), its seeds' final test accuracy, F1 and time."""
    cells: dict[str, dict[str, Any]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for run in data["runs"]:
            parts = run["cell"].split("/")
            ds, part = parts[0], parts[1]
            pseed = next((int(x[1:]) for x in parts[2:] if x[:1] == "p" and x[1:].isdigit()), None)
            rest = [x for x in parts[2:] if not (x[:1] == "p" and x[1:].isdigit())]
            method, protocol = rest[0], (rest[1] if len(rest) > 1 else "plaintext")
            stats = data.get("partitions", {}).get(f"{ds}/{part}/p{pseed}", {})
            cell = cells.setdefault(
                run["cell"],
                {
                    "dataset": ds,
                    "partition": part,
                    "partition_seed": pseed,
                    "method": method,
                    "protocol": protocol,
                    "client_sizes": stats.get("sizes"),
                    "runs": [],
                },
            )
            if run["seed"] not in {r["seed"] for r in cell["runs"]}:
                cell["runs"].append({k: run[k] for k in ("seed", "test_acc", "test_f1", "seconds")})
    out = list(cells.values())
    for cell in out:
        cell["runs"].sort(key=lambda r: r["seed"])
    return out


#: The accuracies of a reproduce_fedlog.py ``claim`` row (fractions, or ``None`` where undefined).
FEDLOG_CLAIM_METRICS = ("seen_test", "unseen_node", "missing_class", "new_client")
#: The settings of a ``claim`` run that must agree between files filed into one record (the script's merge keys
#: and what changes a figure: the classifier and the rounds).
FEDLOG_CLAIM_SETTINGS = (
    "missing_per_client",
    "min_missing_nodes",
    "hops",
    "rounds",
    "protocol",
    "classifier_mode",
)


def _fedlog_claim_label(args: dict[str, Any], method: str) -> str:
    """A claim row's method as the script's ``report`` labels it: ``fedlog`` or ``fedlog-nopg`` by prompt mode."""
    if method != "fedlog":
        return method
    return "fedlog" if args.get("prompt_mode", "paper") == "paper" else "fedlog-nopg"


def read_fedlog(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """reproduce_fedlog.py ``table`` and ``claim`` files (``--out``), or records ``collect`` wrote earlier.

    ``table``: one cell per (dataset, partition, protocol), its seeds' test accuracy (fraction) at the
    best-validation round, and their time. ``claim``: one cell per (dataset, K, method), carrying ``clients``,
    its seeds' four accuracies at FedLoG's best round and their time; FedLoG cells are labelled by prompt mode
    (``fedlog``, ``fedlog-nopg``), and ``fedavg-local`` (a second view of the ``fedavg`` runs) is marked
    ``same_run_as`` so its time is not counted twice. Claim files must share :data:`FEDLOG_CLAIM_SETTINGS`.
    """
    cells: dict[tuple[Any, ...], dict[str, Any]] = {}
    settings: dict[tuple[Any, ...], list[str]] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if "cells" in data and data.get("paper") == "fedlog":  # a saved record: its cells as they are
            for cell in data["cells"]:
                key = _fedlog_key(cell)
                into = cells.setdefault(key, {**cell, "runs": []})
                seen = {r["seed"] for r in into["runs"]}
                into["runs"] += [r for r in cell["runs"] if r["seed"] not in seen]
                if "clients" in cell:
                    files = settings.setdefault(tuple(cell["settings"][k] for k in FEDLOG_CLAIM_SETTINGS), [])
                    files += [str(path)] if str(path) not in files else []
            continue
        args = data.get("args", {})
        kind = args.get("experiment")
        if kind not in ("table", "claim"):
            raise SystemExit(f"collect: {path} is not a reproduce_fedlog.py 'table' or 'claim' result")
        mode = args.get("classifier_mode")
        if kind == "claim":
            stored = {k: args.get(k) for k in FEDLOG_CLAIM_SETTINGS}
            settings.setdefault(tuple(stored.values()), []).append(str(path))
        for row in data["rows"]:
            if kind == "table":
                cell = cells.setdefault(
                    (row["dataset"], row["partition"], row["protocol"]),
                    {
                        "dataset": row["dataset"],
                        "partition": row["partition"],
                        "protocol": row["protocol"],
                        "classifier_mode": mode,
                        "runs": [],
                    },
                )
                run = {"seed": row["seed"], "test_acc": row["test_acc"] / 100, "seconds": row["seconds"]}
            else:
                method = _fedlog_claim_label(args, row["method"])
                cell = cells.setdefault(
                    (row["dataset"], row["clients"], method),
                    {
                        "dataset": row["dataset"],
                        "clients": row["clients"],
                        "method": method,
                        "protocol": args.get("protocol"),
                        "classifier_mode": mode,
                        "settings": stored,
                        "runs": [],
                    },
                )
                if method == "fedavg-local":
                    cell["same_run_as"] = "fedavg"
                run = {k: row[k] for k in (*FEDLOG_CLAIM_METRICS, "round", "seed", "seconds")}
            if row["seed"] not in {r["seed"] for r in cell["runs"]}:
                cell["runs"].append(run)
    if len(settings) > 1:
        lines = "\n".join(
            f"  {dict(zip(FEDLOG_CLAIM_SETTINGS, k, strict=True))}: {', '.join(v)}"
            for k, v in settings.items()
        )
        raise SystemExit(f"collect: the claim files were measured on different settings:\n{lines}")
    out = list(cells.values())
    for cell in out:
        cell["runs"].sort(key=lambda r: r["seed"])
    return out


def _fedlog_key(cell: dict[str, Any]) -> tuple[Any, ...]:
    """A FedLoG cell's identity: (dataset, partition, protocol) in the table, (dataset, K, method) in the claim."""
    if "clients" in cell:
        return (cell["dataset"], cell["clients"], cell["method"])
    return (cell["dataset"], cell["partition"], cell["protocol"])


def read_libraries(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The distinct library versions the files' results ran with (``securefgl.provenance``), in
    the order first read: a script's ``libraries``, FedSpray's ``_libraries`` by setting, or the list a saved
    record carries. Files written before the scripts recorded them, and logs (FedStruct's JSON lines), add
    nothing."""
    out: list[dict[str, Any]] = []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict):
            continue
        found = data.get("libraries") or []
        found = [found] if isinstance(found, dict) else list(found)
        found += list((data.get("_libraries") or {}).values())
        out += [v for v in found if v not in out]
    return out


def collect(args: argparse.Namespace) -> Path:
    files = [Path(f) for f in args.files]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise SystemExit(f"collect: no such file: {', '.join(missing)}")
    record: dict[str, Any] = {
        "paper": args.paper,
        "name": args.name,
        "title": args.title or args.name,
        "command": args.command,
        "machine": args.machine,
        "partition": args.partition,
        "split_label": args.split_label,
    }
    if args.paper == "adafgl":
        record["cells"] = read_adafgl(files)
    elif args.paper == "fedstruct":
        record["dataset"] = args.dataset
        record["protocol"] = args.protocol
        record["results"] = read_fedstruct(files)
    elif args.paper == "fedspray":
        record["cells"] = read_fedspray(files)
    elif args.paper == "opfgl":
        record["cells"] = read_opfgl(files)
    elif args.paper == "fedlog":
        record["cells"] = read_fedlog(files)
    else:  # pragma: no cover - argparse restricts --paper to PAPERS
        raise SystemExit(f"collect: unknown paper {args.paper!r}")
    libraries = read_libraries(files)
    if libraries:
        record["libraries"] = libraries
    out = Path(args.dir) / args.paper / f"{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, default=float) + "\n")
    print(f"wrote {out}")
    return out


# ----------------------------------------------------------------------------------------------------------
# render
# ----------------------------------------------------------------------------------------------------------


def load_records(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Every ``<dir>/<paper>/*.json``, by paper, in name order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(Path(directory).glob("*/*.json")):
        rec = json.loads(path.read_text())
        rec["_file"] = path.relative_to(directory.parent).as_posix() if directory.is_absolute() else str(path)
        out.setdefault(rec["paper"], []).append(rec)
    return out


def adafgl_rows(records: Sequence[dict[str, Any]]) -> list[str]:
    """The AdaFGL table: one row per saved cell and protocol."""
    lines = [
        "| cell | partition | split | protocol | AdaFGL (ours) | reference weighting | AdaFGL + blend (weights) "
        f"| FedAvg-GCN (ours) | Local (ours) | centralised GCN (ours) | paper | within {TOLERANCE} | seeds | s / seed "
        "| result file |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    local_of = _local_runs(records)
    for rec in records:
        for cell in rec["cells"]:
            key = (cell["dataset"], cell["split"])
            paper = ADAFGL_PAPER.get(key)
            by_proto: dict[str, list[dict[str, Any]]] = {}
            for r in cell["runs"]:
                by_proto.setdefault(r["protocol"], []).append(r)
            for protocol, runs in sorted(by_proto.items(), reverse=True):
                acc = [100 * r["adafgl_test_acc"] for r in runs]
                refw = [
                    100 * r["reference_weighted_test_acc"] for r in runs if "reference_weighted_test_acc" in r
                ]
                fed = [100 * r["fedavg_test_acc_last"] for r in runs]
                local_acc = [
                    r.get("local_test_acc", local_of.get(_baseline_key(cell, r["seed"]))) for r in runs
                ]
                local = [100 * x for x in local_acc if x is not None]
                central = [100 * r["centralized_test_acc"] for r in runs if "centralized_test_acc" in r]
                blended = [r for r in runs if "adafgl_blend_test_acc" in r]
                blend = pm([100 * r["adafgl_blend_test_acc"] for r in blended])
                if blended:
                    blend += " (" + "/".join(f"{r['blend_weight']:g}" for r in blended) + ")"
                m = mean_std(acc)[0]
                if paper is None:
                    within = "-"
                else:
                    within = "yes" if abs(m - paper[0]) <= TOLERANCE else "no"
                    if blended:
                        bm = mean_std([100 * r["adafgl_blend_test_acc"] for r in blended])[0]
                        within += " / blend " + ("yes" if abs(bm - paper[0]) <= TOLERANCE else "no")
                    if refw:
                        within += " / " + ("yes" if abs(mean_std(refw)[0] - paper[0]) <= TOLERANCE else "no")
                split = rec.get("split_label") or "/".join(f"{round(100 * x)}" for x in cell["ratios"])
                features = ", row-normalised features" if cell.get("row_normalize") else ""
                if cell.get("num_clients", 10) != 10:
                    features += f", {cell['num_clients']} client{'s' if cell['num_clients'] > 1 else ''}"
                if cell.get("injection") == "code":
                    features += ", the code's injection"
                features += _options_label(cell)
                lines.append(
                    f"| {cell['dataset']} {cell['split']}{features} | {rec.get('partition') or cell['partition']} "
                    f"| {split} | {protocol} ({cell.get('device', 'cpu')}) | {pm(acc)} | {pm(refw) if refw else '-'} "
                    f"| {blend} | {pm(fed)} | {pm(local)} | {pm(central)} | {'-' if paper is None else f'{paper[0]:.1f} ± {paper[1]:.1f}'} | {within} "
                    f"| {len(runs)} ({min(r['seed'] for r in runs)}-{max(r['seed'] for r in runs)}) "
                    f"| {statistics.fmean(r['seconds'] for r in runs):.0f} | `{rec['_file']}` |"
                )
            if {"secagg", "plaintext"} <= set(by_proto):
                sec = {r["seed"]: r["adafgl_test_acc"] for r in by_proto["secagg"]}
                pla = {r["seed"]: r["adafgl_test_acc"] for r in by_proto["plaintext"]}
                common = sorted(set(sec) & set(pla))
                gap = max(abs(sec[s] - pla[s]) for s in common) * 100
                lines.append(
                    f"| {cell['dataset']} {cell['split']} | | | secagg vs plaintext, seeds "
                    f"{','.join(map(str, common))} | largest per-seed gap {gap:.2f} points | | | | | "
                    f"| | {'identical' if gap == 0 else 'differ'} | | | |"
                )
    return lines


def _options_label(cell: dict[str, Any]) -> str:
    """``", extractor=last"`` for a cell run with AdaFGL options; empty for the defaults."""
    return "".join(f", {k}={v}" for k, v in sorted((cell.get("options") or {}).items()))


def _baseline_key(cell: dict[str, Any], seed: int) -> str:
    """A cell's Local run of one seed: it depends on the data, partition and split, not on AdaFGL's options."""
    keep = ("dataset", "split", "ratios", "partition", "injection", "num_clients", "row_normalize", "device")
    return json.dumps([{k: cell.get(k) for k in keep}, seed], sort_keys=True)


def _local_runs(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Every saved Local test accuracy by :func:`_baseline_key`, for the cells that ran without the column."""
    return {
        _baseline_key(cell, r["seed"]): r["local_test_acc"]
        for rec in records
        for cell in rec["cells"]
        for r in cell["runs"]
        if "local_test_acc" in r
    }


#: Issue 27's datasets, and its bar on their cells (points from the paper).
HETEROPHILOUS = ("squirrel", "actor", "chameleon")
HETEROPHILOUS_TOLERANCE = 4.0


def paired(a: Sequence[float], b: Sequence[float]) -> str:
    """Mean of ``a - b`` over paired seeds, with its 95 % t confidence interval (differences below 1e-9 points,
    the rounding of two pooled ratios of the same predictions, count as 0)."""
    diff = [0.0 if abs(x - y) < 1e-9 else x - y for x, y in zip(a, b, strict=True)]
    m, s = mean_std(diff)
    if len(diff) < 2:
        return f"{m:+.1f}"
    half = float(student_t.ppf(0.975, len(diff) - 1)) * s / math.sqrt(len(diff))
    return f"{m:+.1f} [{m - half:+.1f}, {m + half:+.1f}]"


def adafgl_baseline_rows(records: Sequence[dict[str, Any]]) -> list[str]:
    """Issue 27's questions per heterophilous cell: does AdaFGL match FedAvg-GCN, and is it within 4 points?

    Paired by seed (same partition, same FedAvg-GCN run): secagg runs of our draws with the blend. A cell run
    with AdaFGL options (e.g. ``extractor="last"``, saved without the Local column) is paired with the Local
    run of the same cell and seed in another record: Local trains without AdaFGL.
    """
    local_of = _local_runs(records)
    lines = [
        "AdaFGL against its own baselines on the heterophilous cells (issue 27; secagg, our draws, paired by seed: "
        "mean difference in points with its 95 % t interval):",
        "",
        "| cell | split | injection | seeds | blend − FedAvg-GCN (last round) | blend − FedAvg-GCN (best-val round) "
        f"| eq. 17 − FedAvg-GCN | blend − Local | blend − paper | within {HETEROPHILOUS_TOLERANCE:g} (blend) "
        "| centralised GCN − paper |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        for cell in rec["cells"]:
            paper = ADAFGL_PAPER.get((cell["dataset"], cell["split"]))
            runs = [r for r in cell["runs"] if r["protocol"] == "secagg" and "adafgl_blend_test_acc" in r]
            if (
                cell["dataset"] not in HETEROPHILOUS
                or cell["partition"] != "ours"
                or not runs
                or paper is None
            ):
                continue
            if cell.get("row_normalize") or cell.get("num_clients", 10) != 10:
                continue
            blend = [100 * r["adafgl_blend_test_acc"] for r in runs]
            eq17 = [100 * r["adafgl_test_acc"] for r in runs]
            fed = [100 * r["fedavg_test_acc_last"] for r in runs]
            fed_best = [100 * r["fedavg_test_acc_bestval"] for r in runs]
            with_local = [(r, local_of.get(_baseline_key(cell, r["seed"]))) for r in runs]
            with_local = [(r, acc) for r, acc in with_local if acc is not None]
            local = (
                paired(
                    [100 * r["adafgl_blend_test_acc"] for r, _ in with_local],
                    [100 * acc for _, acc in with_local],
                )
                if with_local
                else "-"
            )
            central = [100 * r["centralized_test_acc"] for r in runs if "centralized_test_acc" in r]
            gap = mean_std(blend)[0] - paper[0]
            lines.append(
                f"| {cell['dataset']} {cell['split']}{_options_label(cell)} "
                f"| {'/'.join(f'{round(100 * x)}' for x in cell['ratios'])} "
                f"| {cell.get('injection', '-')} | {len(runs)} | {paired(blend, fed)} | {paired(blend, fed_best)} "
                f"| {paired(eq17, fed)} | {local} "
                f"| {gap:+.1f} | {'yes' if abs(gap) <= HETEROPHILOUS_TOLERANCE else 'no'} "
                f"| {f'{mean_std(central)[0] - paper[0]:+.1f} ({len(central)} seeds)' if central else '-'} |"
            )
    return lines if len(lines) > 4 else []


def fedstruct_rows(records: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| dataset | method | protocol | ours (mean ± pop. std) | paper | within | seeds | s / seed | result file |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in records:
        paper = FEDSTRUCT_PAPER.get(str(rec["dataset"]).lower())
        for method, rows in rec["results"].items():
            acc = [100 * r["test_acc"] for r in rows]
            m = statistics.fmean(acc)
            s = statistics.pstdev(acc) if len(acc) > 1 else 0.0
            within = (
                "-"
                if paper is None or method != "fedstruct"
                else ("yes" if abs(m - paper[0]) <= TOLERANCE else "no")
            )
            lines.append(
                f"| {rec['dataset']} | {method} | {rec['protocol']} | {m:.2f} ± {s:.2f} | "
                f"{'-' if paper is None else f'{paper[0]:.2f} ± {paper[1]:.2f}'} | {within} | "
                f"{','.join(str(r['seed']) for r in rows)} | {statistics.fmean(r['seconds'] for r in rows):.0f} "
                f"| `{rec['_file']}` |"
            )
    return lines


def opfgl_rows(records: Sequence[dict[str, Any]]) -> list[str]:
    """The O-pFGL table: one row per saved (dataset, partition, method), secagg and plaintext side by side."""
    names = {"opfgl": "O-pFGL", "fedavg": "FedAvg", "standalone": "Standalone"}
    lines = [
        "Final test accuracy and macro-F1 (%, node-weighted over clients), mean ± population std over seeds. "
        "Targets: O-pFGL Tables 1/6 (O-pFGL, Standalone) and 9/10 (FedAvg, 100 rounds).",
        "",
        f"| dataset | partition | method | target acc | secagg acc | plaintext acc | secagg − plaintext | within "
        f"{TOLERANCE} | target F1 | secagg F1 | plaintext F1 | seeds | s / run | result file |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    footer: list[str] = []  # run-time lines go under the table, not between its rows
    for rec in records:
        groups: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
        for cell in rec["cells"]:
            groups.setdefault((cell["dataset"], cell["partition"], cell["method"]), {})[cell["protocol"]] = (
                cell
            )
        for (ds, part, method), by_proto in groups.items():
            sec = by_proto.get("secagg", {}).get("runs", [])
            pla = by_proto.get("plaintext", {}).get("runs", [])
            target = OPFGL_PAPER.get((ds, part), {}).get(method)

            def vals(runs: list[dict[str, Any]], metric: str) -> list[float]:
                return [100 * r[metric] for r in runs]

            main = sec or pla
            within = "-"
            if target and main:
                within = (
                    "yes" if abs(statistics.fmean(vals(main, "test_acc")) - target[0]) <= TOLERANCE else "no"
                )
                within += "" if sec else " (plaintext)"
            diff = "-"
            a = {r["seed"]: r for r in sec}
            b = {r["seed"]: r for r in pla}
            common = sorted(set(a) & set(b))
            if common:
                gaps = [100 * abs(a[s][m] - b[s][m]) for s in common for m in ("test_acc", "test_f1")]
                mean_gap = statistics.fmean(100 * (a[s]["test_acc"] - b[s]["test_acc"]) for s in common)
                diff = (
                    "0 (identical per seed, accuracy and F1)"
                    if max(gaps) == 0
                    else f"{mean_gap:+.2f} (largest per-seed gap {max(gaps):.2f})"
                )
            cell = next(iter(by_proto.values()))
            where = rec.get("partition") or (
                f"ours, partition seed {cell['partition_seed']}"
                if cell["partition_seed"] is not None
                else "ours"
            )
            runs = sec + pla
            lines.append(
                f"| {ds} | {part} ({where}) | {names.get(method, method)} | "
                f"{_paper(target, 0)} | {_pop(vals(sec, 'test_acc'))} | "
                f"{_pop(vals(pla, 'test_acc'))} | {diff} | {within} | "
                f"{_paper(target, 2)} | {_pop(vals(sec, 'test_f1'))} | "
                f"{_pop(vals(pla, 'test_f1'))} | {_seeds(sec, pla)} | "
                f"{statistics.fmean(r['seconds'] for r in runs):.0f} | `{rec['_file']}` |"
            )
        footer += _run_time(rec)
    return lines + footer


def fedlog_rows(records: Sequence[dict[str, Any]]) -> list[str]:
    """The FedLoG table (O-pFGL's third-party rows): one row per saved (dataset, partition)."""
    lines = [
        "Test accuracy (%, node-weighted over clients, local models at the best-validation round), mean ± "
        "population std over seeds. Targets: O-pFGL Tables 9/10, FedLoG rows.",
        "",
        f"| dataset | partition | classifier | target acc | secagg acc | plaintext acc | secagg − plaintext | "
        f"within {TOLERANCE} | seeds | s / run | result file |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    footer: list[str] = []  # run-time lines go under the table, not between its rows
    for rec in records:
        if all("clients" in cell for cell in rec["cells"]):
            continue  # a claim record: fedlog_claim_rows
        groups: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        for cell in rec["cells"]:
            if "clients" not in cell:
                groups.setdefault((cell["dataset"], cell["partition"]), {})[cell["protocol"]] = cell
        for (ds, part), by_proto in groups.items():
            sec = by_proto.get("secagg", {}).get("runs", [])
            pla = by_proto.get("plaintext", {}).get("runs", [])
            target = FEDLOG_PAPER.get((ds, part))
            main = sec or pla
            within = "-"
            if target and main:
                mean = statistics.fmean(100 * r["test_acc"] for r in main)
                within = ("yes" if abs(mean - target[0]) <= TOLERANCE else "no") + (
                    "" if sec else " (plaintext)"
                )
            a = {r["seed"]: r["test_acc"] for r in sec}
            b = {r["seed"]: r["test_acc"] for r in pla}
            common = sorted(set(a) & set(b))
            diff = "-"
            if common:
                gap = max(100 * abs(a[s_] - b[s_]) for s_ in common)
                diff = "0 (identical per seed)" if gap == 0 else f"largest per-seed gap {gap:.2f}"
            mode = next(iter(by_proto.values())).get("classifier_mode") or "-"
            runs = sec + pla
            lines.append(
                f"| {ds} | {part} ({rec.get('partition') or 'ours'}) | {mode} | {_paper(target, 0)} | "
                f"{_pop([100 * r['test_acc'] for r in sec])} | {_pop([100 * r['test_acc'] for r in pla])} | "
                f"{diff} | {within} | {_seeds(sec, pla)} | "
                f"{statistics.fmean(r['seconds'] for r in runs):.0f} | `{rec['_file']}` |"
            )
        footer += _run_time(rec)
    return lines + footer


def _run_time(rec: dict[str, Any]) -> list[str]:
    """The line under a table: the result file's total run time and the machine it ran on."""
    total = sum(r["seconds"] for cell in rec["cells"] if "same_run_as" not in cell for r in cell["runs"])
    return ["", f"Run time of `{rec['_file']}`: {total / 60:.0f} min in all, on: {rec['machine']}."]


def _paper(target: Sequence[float] | None, i: int) -> str:
    """The paper's mean ± std at ``target[i], target[i + 1]`` (accuracy at 0, F1 at 2); ``-`` without one."""
    return f"{target[i]:.2f} ± {target[i + 1]:.2f}" if target else "-"


def _seeds(sec: Sequence[dict[str, Any]], pla: Sequence[dict[str, Any]]) -> str:
    """The seeds of a row: one list when both protocols ran the same ones, else one per protocol."""
    a, b = sorted(r["seed"] for r in sec), sorted(r["seed"] for r in pla)
    if a == b or not a or not b:
        return ",".join(map(str, a or b))
    return f"secagg {','.join(map(str, a))}; plaintext {','.join(map(str, b))}"


def _pop(values: Sequence[float]) -> str:
    """Mean ± population std (the scripts' and O-pFGL's convention), two decimals."""
    return f"{statistics.fmean(values):.2f} ± {statistics.pstdev(values):.2f}" if values else "-"


def fedspray_rows(records: Sequence[dict[str, Any]]) -> list[str]:
    """The FedSpray table: one row per saved setting, secagg and plaintext side by side, seed by seed compared."""
    rule, alt = FEDSPRAY_RULES[0], FEDSPRAY_RULES[1]
    seed = script_constant(PAPERS["fedspray"]["script"], "PARTITION_SEED")
    lines = [
        f"Test accuracy and macro-F1 (%, node-weighted over clients), mean ± population std over seeds, at the "
        f"round with the lowest validation loss (FedSpray's code; `{rule}`), and secagg accuracy at the best "
        f"validation-accuracy round (`{alt}`) for comparison. Targets: O-pFGL Tables 9/10 (FedSpray rows).",
        "",
        f"| dataset | partition | rounds | target acc | secagg acc | plaintext acc | secagg − plaintext | within "
        f"{TOLERANCE} | target F1 | secagg F1 | secagg acc ({alt}) | seeds | s / run | result file |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    footer: list[str] = []  # run-time lines go under the table, not between its rows
    for rec in records:
        if all("method" in cell for cell in rec["cells"]):
            continue  # a claim record: fedspray_claim_rows
        groups: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
        for cell in rec["cells"]:
            if "method" in cell:
                continue
            key = (
                cell["dataset"],
                cell["partition"],
                cell["preset"],
                cell["rounds"],
                cell["reference_partition"],
            )
            groups.setdefault(key, {})[cell["protocol"]] = cell["runs"]
        order = list(FEDSPRAY_PAPER)  # the paper's cell order; other cells after it
        for (ds, part, preset, rounds, ref), by_proto in sorted(
            groups.items(),
            key=lambda kv: (order.index(kv[0][:2]) if kv[0][:2] in order else len(order), str(kv[0])),
        ):
            sec, pla = by_proto.get("secagg", []), by_proto.get("plaintext", [])
            target = FEDSPRAY_PAPER.get((ds, part))

            def vals(runs: list[dict[str, Any]], metric: str, rule: str = rule) -> list[float]:
                return [r["select"][rule][metric] for r in runs]

            within = "-"
            if target and sec:
                within = (
                    "yes" if abs(statistics.fmean(vals(sec, "test_acc")) - target[0]) <= TOLERANCE else "no"
                )
            diff = "-"
            common = sorted({r["seed"] for r in sec} & {r["seed"] for r in pla})
            if common:
                a = {r["seed"]: r["select"] for r in sec}
                b = {r["seed"]: r["select"] for r in pla}
                gaps = [abs(a[s][q][m] - b[s][q][m]) for s in common for q in a[s] for m in a[s][q]]
                mean_gap = statistics.fmean(a[s][rule]["test_acc"] - b[s][rule]["test_acc"] for s in common)
                diff = (
                    "0 (identical per seed, every rule and metric: grid upload)"
                    if max(gaps) == 0
                    else f"{mean_gap:+.2f} (largest per-seed gap {max(gaps):.2f})"
                )
            runs = sec + pla
            where = "O-pFGL's own partition (reference replay)" if ref else f"ours, partition seed {seed}"
            lines.append(
                f"| {ds} | {part} ({where}) | {rounds} ({preset}) | "
                f"{_paper(target, 0)} | {_pop(vals(sec, 'test_acc'))} | "
                f"{_pop(vals(pla, 'test_acc'))} | {diff} | {within} | "
                f"{_paper(target, 2)} | {_pop(vals(sec, 'test_f1'))} | "
                f"{_pop(vals(sec, 'test_acc', alt))} | {_seeds(sec, pla)} | "
                f"{statistics.fmean(r['seconds'] for r in runs):.0f} | `{rec['_file']}` |"
            )
        footer += _run_time(rec)
    return lines + footer


def fedspray_claim_rows(records: Sequence[dict[str, Any]]) -> list[str]:
    """FedSpray's minority-node claim: minority and overall test accuracy of FedSpray, FedAvg and Local (same
    GCN, same partition) and FedSpray's paired per-seed gaps, at each of the first two selection rules."""
    lines: list[str] = []
    footer: list[str] = []
    for rec in records:
        cells = [c for c in rec["cells"] if "method" in c]
        if not cells:
            continue
        if not lines:
            lines = [
                "FedSpray's minority-node claim (`claim`): test accuracy (%) on the minority nodes (pooled over the "
                "test nodes whose class is not their client's majority training class) and on all test nodes, "
                "FedSpray against FedAvg and Local with the same GCN on the same partition; the gaps are paired by "
                "seed (mean ± population std). The paper's gaps (its Table 2, GCN, FedSpray − best baseline, "
                "minority): PubMed +6.35, WikiCS +6.07, Physics +8.15, Flickr +3.27.",
                "",
                "| dataset | partition | rule | FedSpray minority | FedAvg minority | Local minority | FedSpray − "
                "FedAvg | FedSpray − Local | overall FedSpray / FedAvg / Local | protocol | seeds | s / run | "
                "result file |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            ]
        by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        for cell in cells:
            by.setdefault((cell["dataset"], cell["partition"]), {})[cell["method"]] = cell
        for (ds, part), methods in by.items():
            if set(methods) != set(FEDSPRAY_CLAIM_METHODS):
                continue
            runs = {m: {r["seed"]: r for r in c["runs"]} for m, c in methods.items()}
            seeds = sorted(set.intersection(*(set(r) for r in runs.values())))
            protocols = "/".join(methods[m]["protocol"] for m in FEDSPRAY_CLAIM_METHODS)
            secs = statistics.fmean(r["seconds"] for m in runs for r in runs[m].values())
            for rule in FEDSPRAY_RULES[:2]:
                sel = {m: [runs[m][s]["select"][rule] for s in seeds] for m in FEDSPRAY_CLAIM_METHODS}
                minority = {m: [r["test_minority_acc"] for r in sel[m]] for m in sel}
                gaps = [
                    [x - y for x, y in zip(minority["fedspray"], minority[other], strict=True)]
                    for other in ("fedavg", "local")
                ]
                overall = " / ".join(
                    f"{statistics.fmean(r['test_acc'] for r in sel[m]):.2f}" for m in FEDSPRAY_CLAIM_METHODS
                )
                lines.append(
                    f"| {ds} | {part} (FedSpray's style) | `{rule}` | "
                    f"{' | '.join(_pop(minority[m]) for m in FEDSPRAY_CLAIM_METHODS)} | {' | '.join(f'{statistics.fmean(g):+.2f} ± {statistics.pstdev(g):.2f}' for g in gaps)} | "
                    f"{overall} | {protocols} | {','.join(map(str, seeds))} | {secs:.0f} | `{rec['_file']}` |"
                )
        footer += _run_time(rec)
    return lines + footer


def fedlog_claim_rows(records: Sequence[dict[str, Any]]) -> list[str]:
    """FedLoG's generalisation claim: the four accuracies of every method per (dataset, K), then the claim's
    verdict per (dataset, K) and FedLoG variant against each FedAvg view (:func:`claim_verdicts`)."""
    lines: list[str] = []
    footer: list[str] = []
    for rec in records:
        cells = [c for c in rec["cells"] if "clients" in c]
        if not cells:
            continue
        if not lines:
            lines = [
                "FedLoG's generalisation claim (`claim`, FedLoG's own partition: LCC, Metis into K+1 parts, the "
                "held-out New Client, missing tail classes, 40/30/30 split): test accuracy (%, mean ± population "
                "std over seeds) on the Seen Graph, Unseen Nodes, Missing Classes and the New Client, every method "
                "at the round with the best Seen-Graph validation accuracy. `fedavg` is FedAvg's aggregated model, "
                "`fedavg-local` its post-update local models (how the paper's FedAvg code scores it); "
                "`fedlog-nopg` is the w/o-prompt-generator ablation. The claim: Missing Class and New Client above "
                f"FedAvg and Local, Seen Graph at most {CLAIM_SEEN_TOLERANCE:g} point below FedAvg.",
                "",
                "| dataset | K | method | Seen Graph | Unseen Node | Missing Class | New Client | protocol | seeds | "
                "s / run | result file |",
                "|---|---|---|---|---|---|---|---|---|---|---|",
            ]
        order = ("fedlog", "fedlog-nopg", "fedavg", "fedavg-local", "local")
        cells.sort(
            key=lambda c: (
                c["dataset"],
                c["clients"],
                order.index(c["method"]) if c["method"] in order else 9,
            )
        )
        for c in cells:
            metrics = " | ".join(
                _pop([100 * r[m] for r in c["runs"] if r[m] is not None]) for m in FEDLOG_CLAIM_METRICS
            )
            secs = (
                "same runs as fedavg"
                if "same_run_as" in c
                else f"{statistics.fmean(r['seconds'] for r in c['runs']):.0f}"
            )
            lines.append(
                f"| {c['dataset']} | {c['clients']} | `{c['method']}` | {metrics} | {c['protocol']} | "
                f"{','.join(str(r['seed']) for r in c['runs'])} | {secs} | `{rec['_file']}` |"
            )
        rows = [
            {"dataset": c["dataset"], "clients": c["clients"], "method": c["method"], **r}
            for c in cells
            for r in c["runs"]
        ]
        footer += ["", "The claim's verdict per setting (FedLoG's mean minus the baseline's, points):", ""]
        for v in all_claim_verdicts(rows):
            footer.append(f"- {v.dataset} K={v.clients}, `{v.method}` vs `{v.fedavg}`: {v.describe()}")
        footer += _run_time(rec)
    return lines + footer


def docstring_block(paper: str) -> list[str]:
    """The measured part of a script's docstring (between its markers), quoted as it stands."""
    meta = PAPERS[paper]
    text = ast.get_docstring(ast.parse((ROOT / meta["script"]).read_text())) or ""
    start, end = meta["docstring"]
    i = text.find(start)
    if i < 0:
        return [f"(the docstring of `{meta['script']}` has no paragraph starting {start!r})"]
    j = text.find(end, i) if end else -1
    block = text[i : j if j > 0 else len(text)].strip()
    return ["```text", *block.splitlines(), "```"]


def describe_libraries(versions: dict[str, Any]) -> str:
    """``python 3.11.7, torch 2.13.0+cpu, ..., securefgl at 1a2b3c4d5e``: the installed ones."""
    parts = [f"{name} {v}" for name, v in versions.items() if v is not None and name != "securefgl_commit"]
    commit = versions.get("securefgl_commit")
    if commit:
        parts.append(f"securefgl at {commit[:10]}{'+dirty' if commit.endswith('+dirty') else ''}")
    return ", ".join(parts)


def commands(records: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for rec in records:
        libraries = "; ".join(describe_libraries(v) for v in rec.get("libraries", []))
        out.append(
            f"- **{rec['title']}** ({rec['machine']}"
            + (f"; libraries: {libraries}" if libraries else "")
            + "):"
        )
        out.append("  ```bash")
        out.extend(f"  {line}" for line in str(rec["command"]).splitlines())
        out.append("  ```")
    return out


def glance(records: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per paper: how many saved secagg cells are within the bar, or that none is saved."""
    out = [f"| paper | saved secagg cells within {TOLERANCE} of the paper | source |", "|---|---|---|"]
    for paper, meta in PAPERS.items():
        hits: list[str] = []
        for rec in records.get(paper, []):
            if paper == "adafgl":
                for cell in rec["cells"]:
                    ref = ADAFGL_PAPER.get((cell["dataset"], cell["split"]))
                    acc = [100 * r["adafgl_test_acc"] for r in cell["runs"] if r["protocol"] == "secagg"]
                    if ref and acc and not cell.get("row_normalize") and not rec["name"].startswith("issue"):
                        hits.append("yes" if abs(statistics.fmean(acc) - ref[0]) <= TOLERANCE else "no")
            elif paper == "fedstruct":
                ref = FEDSTRUCT_PAPER.get(str(rec["dataset"]).lower())
                rows = rec["results"].get("fedstruct", [])
                if ref and rows:
                    m = statistics.fmean(100 * r["test_acc"] for r in rows)
                    hits.append("yes" if abs(m - ref[0]) <= TOLERANCE else "no")
            elif paper == "opfgl":
                for cell in rec["cells"]:
                    ref = OPFGL_PAPER.get((cell["dataset"], cell["partition"]), {}).get("opfgl")
                    if ref and cell["method"] == "opfgl" and cell["protocol"] == "secagg" and cell["runs"]:
                        m = statistics.fmean(100 * r["test_acc"] for r in cell["runs"])
                        hits.append("yes" if abs(m - ref[0]) <= TOLERANCE else "no")
            elif paper == "fedlog":
                for cell in rec["cells"]:
                    ref = FEDLOG_PAPER.get((cell["dataset"], cell.get("partition")))
                    # an ``issue*`` record re-runs a saved cell as a check (plaintext equality), not a new cell
                    if (
                        ref
                        and cell["protocol"] == "secagg"
                        and cell["runs"]
                        and not rec["name"].startswith("issue")
                    ):
                        m = statistics.fmean(100 * r["test_acc"] for r in cell["runs"])
                        hits.append("yes" if abs(m - ref[0]) <= TOLERANCE else "no")
            elif paper == "fedspray":
                for cell in rec["cells"]:
                    ref = FEDSPRAY_PAPER.get((cell["dataset"], cell["partition"]))
                    if ref and cell["protocol"] == "secagg" and cell["runs"]:
                        m = statistics.fmean(r["select"][FEDSPRAY_RULES[0]]["test_acc"] for r in cell["runs"])
                        hits.append("yes" if abs(m - ref[0]) <= TOLERANCE else "no")
        name = meta["title"].split(" (")[0]
        if hits:
            lines = f"{hits.count('yes')} of {len(hits)}"
            src = "saved results (tables below) and the script's docstring for the rest"
        else:
            lines = "none saved yet"
            src = "the script's docstring (CPU figures, quoted below)"
        out.append(f"| [{name}](#{anchor(meta['title'])}) | {lines} | {src} |")
    return out


def anchor(title: str) -> str:
    """GitHub's heading anchor of ``title``."""
    keep = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def render(directory: Path) -> str:
    records = load_records(directory)
    lines = [
        "# Reproductions",
        "",
        "<!-- Generated by `python examples/reproductions_report.py render` from the saved results in",
        "     `reproductions/`; do not edit by hand. -->",
        "",
        "Does securefgl reproduce paper X? One section per seed paper: the published cells we target, our figure",
        "under secure aggregation (`secagg`: mean ± std over the seeds listed), whether `plaintext` gives the same",
        "figure, the partition (our own draw, or the exact replay of the paper's), the command, its run time per",
        f"seed on the stated machine, and, where a cell is not reached (more than {TOLERANCE} points from the paper),",
        "the measured reason. Tables come from `reproductions/<paper>/*.json` (written by the reproduction scripts'",
        "`--out` and filed by `examples/reproductions_report.py collect`); where a paper has no saved result yet,",
        "the section quotes the figures of its script's docstring, which were measured on a CPU by an earlier",
        "session, and says so. Seeded CPU and CUDA runs may differ slightly; each row names its device. So may",
        "runs on other versions of the libraries below securefgl (torch, PyG, numpy, scipy, networkx): a fresh",
        "install of 2026-12-01 gives AdaFGL on Chameleon Louvain, 60/20/20, seed 0, 62.6 (FedAvg-GCN 62.0) where",
        "the saved default row's install gave 61.2 (62.9). Protocols, seeds and options compare to the bit within",
        "one install; the records of 2026-12-01 name theirs.",
        "",
        "Regenerate this page: `python examples/reproductions_report.py render`.",
        "",
        "## At a glance",
        "",
        *glance(records),
        "",
    ]
    for paper, meta in PAPERS.items():
        recs = records.get(paper, [])
        lines += [f"## {meta['title']}", "", f"Script: `{meta['script']}`.", ""]
        if recs and paper == "adafgl":
            lines += adafgl_rows(recs) + [""]
            baselines = adafgl_baseline_rows(recs)
            lines += baselines + ([""] if baselines else [])
        elif recs and paper == "fedstruct":
            lines += fedstruct_rows(recs) + [""]
        elif recs and paper == "fedspray":
            lines += fedspray_rows(recs) + [""]
            claim = fedspray_claim_rows(recs)
            lines += claim + ([""] if claim else [])
        elif recs and paper == "opfgl":
            lines += opfgl_rows(recs) + [""]
        elif recs and paper == "fedlog":
            lines += fedlog_rows(recs) + [""]
            claim = fedlog_claim_rows(recs)
            lines += claim + ([""] if claim else [])
        if recs:
            lines += ["Commands:", ""] + commands(recs) + [""]
        for note in NOTES.get(paper, []):
            lines += [f"- {note}"]
        if NOTES.get(paper):
            lines.append("")
        label = (meta.get("quote_label") or "Earlier figures") if recs else "Figures (no saved result yet)"
        lines += (
            [f"{label}, as the script's docstring states them (CPU):", ""] + docstring_block(paper) + [""]
        )
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    co = sub.add_parser(
        "collect", help="file a script's result files under reproductions/<paper>/<name>.json"
    )
    co.add_argument("--paper", required=True, choices=sorted(PAPERS))
    co.add_argument("--name", required=True)
    co.add_argument("--title", default=None)
    co.add_argument("--command", required=True, help="the command that produced the files")
    co.add_argument("--machine", required=True, help="where it ran, e.g. 'H100 host, 16 CPU cores, CPU runs'")
    co.add_argument("--partition", default=None, help="the partition, e.g. 'exact replay' or 'ours'")
    co.add_argument("--split-label", default=None, help="the split column, when not the cells' ratios")
    co.add_argument("--dataset", default=None, help="fedstruct: the dataset")
    co.add_argument("--protocol", default="secagg", help="fedstruct: the protocol")
    co.add_argument("--dir", default=str(RESULTS))
    co.add_argument("files", nargs="+")
    re_ = sub.add_parser("render", help="write REPRODUCTIONS.md from reproductions/")
    re_.add_argument("--dir", default=str(RESULTS))
    re_.add_argument("--out", default=str(PAGE))
    re_.add_argument(
        "--check", action="store_true", help="exit 1 if the page differs from what render writes"
    )
    args = ap.parse_args(argv)
    if args.verb == "collect":
        collect(args)
        return
    text = render(Path(args.dir))
    if args.check:
        current = Path(args.out).read_text() if Path(args.out).exists() else ""
        if current != text:
            print(f"{args.out} is out of date: run `python examples/reproductions_report.py render`")
            sys.exit(1)
        print(f"{args.out} is up to date")
        return
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
