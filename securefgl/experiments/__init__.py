"""securefgl.experiments: what the reproduction scripts in ``examples/`` share, as a tested library.

One module per concept:

* :mod:`securefgl.experiments.partition_files`: the partition files the scripts read
  (:func:`partition_file`) and their ``--partition-dir`` option (:func:`add_partition_dir_option`);
* :mod:`securefgl.experiments.opfgl_reference_partition`: the replay of the louvain+ / metis+ partitions
  behind O-pFGL's tables;
* :mod:`securefgl.experiments.adafgl_reference_partition`: the replay of the Louvain community split behind
  AdaFGL's Table II;
* :mod:`securefgl.experiments.adafgl`: the settings of AdaFGL's Table II cells (split ratios, partition
  parameters, run config);
* :mod:`securefgl.experiments.claims`: FedLoG's generalisation claim, judged from per-seed result rows
  (:func:`claim_verdicts`);
* :mod:`securefgl.experiments.privacy_sweep`: the privacy-utility sweep's methods, run configurations and
  record names, shared by ``privacy_utility.py`` and ``privacy_tuning.py`` (standard library only);
* :mod:`securefgl.experiments.progress`: the scripts' progress lines (rounds done, time left) through the
  engine's run hooks (:class:`~securefgl.experiments.progress.Progress`; imported by name).

Importing this package, the two replays, :mod:`~securefgl.experiments.claims` or
:mod:`~securefgl.experiments.progress` needs only numpy and the
standard library (no torch), so the replays also run in the reference tools' own environments;
:mod:`securefgl.experiments.adafgl` builds run configs and is imported by name.
"""

from __future__ import annotations

from securefgl.experiments import adafgl_reference_partition, opfgl_reference_partition
from securefgl.experiments.claims import ClaimCheck, ClaimVerdict, all_claim_verdicts, claim_verdicts
from securefgl.experiments.partition_files import add_partition_dir_option, partition_file

__all__ = [
    "ClaimCheck",
    "ClaimVerdict",
    "adafgl_reference_partition",
    "add_partition_dir_option",
    "all_claim_verdicts",
    "claim_verdicts",
    "opfgl_reference_partition",
    "partition_file",
]
