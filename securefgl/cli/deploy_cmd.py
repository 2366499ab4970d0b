"""``securefgl deploy``: the same run with every party its own process, over Flower, on this machine.

Partitions the dataset and exports one file per client, starts a SuperLink (TLS, SuperNode authentication) and
one SuperNode plus worker per client, submits the run with ``flwr run``, shows progress (the ServerApp's
``progress.log``), writes the results folder and shuts every process down on success, failure or Ctrl-C.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from securefgl.cli._app import app

__all__ = ["deploy_command"]


def _overrides(opts: dict[str, Any]) -> dict[str, Any]:
    from securefgl.config import merge, parse_overrides

    out: dict[str, Any] = {}
    pairs = {
        ("protocol", "name"): opts["protocol"],
        ("algorithm", "name"): opts["algorithm"],
        ("dataset", "name"): opts["dataset"],
        ("dataset", "root"): opts["root"],
        ("partition", "clients"): opts["clients"],
        ("train", "rounds"): opts["rounds"],
        ("output", "dir"): str(opts["output"]) if opts["output"] is not None else None,
    }
    for (section, key), value in pairs.items():
        if value is not None:
            out.setdefault(section, {})[key] = value
    if opts["seeds"] is not None:
        out["seeds"] = [int(s) for s in opts["seeds"].split(",")]
    if opts["set_"]:
        out = merge(out, parse_overrides(opts["set_"]))
    return out


def _follow(log: Path, offset: int) -> int:
    """Print the ServerApp's progress lines (its ``progress.log``) written since ``offset``; the new offset."""
    if not log.exists():
        return offset
    with log.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    for line in chunk.decode(errors="replace").splitlines():
        print(line, file=sys.stderr, flush=True)
    return offset + len(chunk)


@app.command("deploy")
def deploy_command(
    clients: Annotated[
        int | None, typer.Option(help="Clients, one SuperNode each. (default: the config's)")
    ] = None,
    protocol: Annotated[
        str | None,
        typer.Option(
            help="secagg, secagg+, ckks or plaintext, each optionally with +dp. (default: secagg) With --set "
            "protocol.options.session_uses=1000 a secure round after the key agreements is 2 Flower steps (with "
            "protocol.options.optimistic_uses=true as well, 1, plaintext's count; a dropout then aborts that "
            "round's sum)."
        ),
    ] = None,
    algorithm: Annotated[str | None, typer.Option(help="Algorithm. (default: fedavg)")] = None,
    dataset: Annotated[str | None, typer.Option(help="Dataset. (default: csbm)")] = None,
    rounds: Annotated[int | None, typer.Option(help="Rounds. (default: the config's)")] = None,
    seeds: Annotated[str | None, typer.Option(help="Comma-separated seeds. (default: 0)")] = None,
    root: Annotated[str | None, typer.Option(help="Data root (SECUREFGL_DATA).")] = None,
    config: Annotated[
        Path | None, typer.Option(help="Run config file (as `securefgl run --config`).")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="section.key=value override (repeatable).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option(help="Results folder. (default: results/<stamp>-deploy-...)")
    ] = None,
    stage_timeout: Annotated[float, typer.Option(help="Seconds to wait for one stage's replies.")] = 120.0,
    run_timeout: Annotated[float, typer.Option(help="Seconds the whole run may take.")] = 3600.0,
    workdir: Annotated[Path | None, typer.Option(help="Keep certificates, keys and logs here.")] = None,
    warm: Annotated[
        bool,
        typer.Option(
            help="Fork each message's ClientApp process from one that imported Flower once (--no-warm: start "
            "each from nothing, as Flower does)."
        ),
    ] = True,
) -> None:
    """Run the job with a SuperLink and one SuperNode per client as separate processes (TLS, authenticated)."""
    from securefgl.api import load_federated_graph
    from securefgl.config import load_run_config, to_dict
    from securefgl.deploy.export import export_clients
    from securefgl.deploy.launcher import DeploymentError, LocalFederation
    from securefgl.deploy.parties import check_deployable

    opts = dict(locals())
    cfg = load_run_config(config, _overrides(opts))
    check_deployable(cfg.protocol.spec.base)  # refuse an undeployable protocol before any work
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = (
        Path(cfg.output.dir) if cfg.output.dir else Path("results") / f"{stamp}-deploy-{cfg.algorithm.name}"
    )
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="securefgl-deploy-"))
    fg = load_federated_graph(cfg)
    export_clients(fg, work / "data")
    print(
        f"[securefgl deploy] {fg.num_clients} client files in {work / 'data'}; starting the federation",
        file=sys.stderr,
    )
    try:
        with LocalFederation(work, work / "data", fg.num_clients, warm=warm) as fed:
            fed.start()
            print(
                f"[securefgl deploy] SuperLink (TLS, SuperNode auth) and {fg.num_clients} SuperNodes up",
                file=sys.stderr,
            )
            run_id = fed.submit(fed.write_app(to_dict(cfg), out_dir.resolve(), stage_timeout))
            deadline, offset, status = time.monotonic() + run_timeout, 0, ""
            while time.monotonic() < deadline and not status.startswith("finished"):
                time.sleep(2.0)
                offset = _follow(out_dir / "progress.log", offset)
                status = fed.poll(run_id)
            _follow(out_dir / "progress.log", offset)
    except KeyboardInterrupt:
        print("[securefgl deploy] interrupted: every process stopped", file=sys.stderr)
        raise typer.Exit(130) from None
    if status != "finished:completed":
        raise DeploymentError(f"run {run_id} ended as {status or 'unfinished'!r}; logs in {work / 'logs'}")
    metrics = json.loads((out_dir / "metrics.json").read_text())
    print(json.dumps({"output_dir": str(out_dir), "summary": metrics.get("summary", {})}, indent=2))
