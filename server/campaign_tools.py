"""The campaign tools: start, watch and stop a campaign over an operator library (``tools/campaign/control.py``).

A campaign runs as its own process (``pypto-tune campaign``), not inside this server: it outlives a client's
connection and is watched through its folder. Each of its sessions goes through the same gates and ledger as an
agent's; while it runs, a ``start_session`` on one of its workspaces from this server attaches read-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import anyio
from mcp.types import ToolAnnotations
from pydantic import Field
from pypto_tune.server.tooling import ToolRegistry
from pypto_tune.tools.campaign.control import CampaignView

STARTS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
WATCH = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
STOPS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

Campaign = Annotated[str, Field(description="the campaign's folder (absolute path, as start_campaign returned it), "
                                "or its id when this server started it")]


def register(reg: ToolRegistry, workspace: Path | None) -> None:
    known: dict[str, Path] = {}  # campaign id -> folder, for campaigns this server started

    @reg.tool(title="Start (or resume) a campaign over an operator library", annotations=STARTS, result=CampaignView)
    async def start_campaign(
        manifest: Annotated[str, Field(description="absolute path of a manifest (.toml / .yaml: each operator's "
                                       "workspace, test command, run mode, goal, budget) or of a folder of operators "
                                       "(one per sub-folder)")],
        out: Annotated[str | None, Field(description="the campaign's folder (board, journal, report); default "
                                         "<manifest folder>/.pypto-tune-campaign/<name>/")] = None,
        executor: Annotated[Literal["local", "ray"], Field(description="where runs execute: this machine or a Ray "
                                                           "cluster")] = "local",
        ray_address: Annotated[str | None, Field(description="with executor=ray: HOST:PORT of the cluster's head")]
        = None,
        resume: Annotated[bool, Field(description="continue the campaign in `out` where its ledgers say it stopped")]
        = False,
        knowledge: Annotated[str | None, Field(description="a knowledge store file: its observations rank every "
                                               "session's candidates, and the campaign's ledgers are added to it")]
        = None,
        goal_speedup: Annotated[float | None, Field(description="folder of operators: the user's goal as a speed-up "
                                                    "(or goal_target_us); never guessed")] = None,
        goal_target_us: Annotated[float | None, Field(description="folder of operators: the goal as a time in µs")]
        = None,
        copy_to: Annotated[str | None, Field(description="folder of operators: tune copies in COPY_TO/<name>")] = None,
        trials: Annotated[int | None, Field(description="folder of operators: trial budget per operator")] = None,
        wall_h: Annotated[float | None, Field(description="folder of operators: wall-time budget per operator (h)")]
        = None,
        batch: Annotated[int | None, Field(description="candidates per batch (default 2)")] = None,
        concurrency: Annotated[int | None, Field(description="sessions at once (default twice the slots)")] = None,
        trials_total: Annotated[int | None, Field(description="overall trial budget")] = None,
        wall_h_total: Annotated[float | None, Field(description="overall wall-time budget (h)")] = None,
    ) -> CampaignView:
        """Tune every operator of a manifest or folder, each a full gated session driven by the server's own search
        (start_session → precision → debug → baseline → analysis → candidate batches per stage → stage exits →
        report), with a budget per operator and an overall one. Returns at once; watch it with campaign_status."""
        from pypto_tune.tools.campaign import control

        options = {"goal_speedup": goal_speedup, "goal_target_us": goal_target_us, "copy_to": copy_to,
                   "trials": trials, "wall_h": wall_h, "batch": batch, "concurrency": concurrency,
                   "trials_total": trials_total, "wall_h_total": wall_h_total}
        result = await anyio.to_thread.run_sync(lambda: control.start(
            manifest, base=workspace, out=out, executor=executor, ray_address=ray_address, resume=resume,
            knowledge=knowledge, options=options))
        known[result.campaign_id] = Path(result.folder)
        return result

    @reg.tool(title="Campaign board", annotations=WATCH, result=CampaignView)
    async def campaign_status(campaign: Campaign) -> CampaignView:
        """The campaign's live board: operators done, running, queued and failed, the best speed-up so far, trials
        used, time left; once it has ended, the paths of its report."""
        from pypto_tune.tools.campaign import control

        return await anyio.to_thread.run_sync(lambda: control.view(control.find(campaign, known)))

    @reg.tool(title="Stop a campaign", annotations=STOPS, result=CampaignView)
    async def stop_campaign(
        campaign: Campaign,
        force: Annotated[bool, Field(description="cancel the running steps (runs killed; sessions stay resumable) "
                                     "instead of letting them finish")] = False,
    ) -> CampaignView:
        """Stop a campaign: running sessions finish their current step, are stopped (recorded as the user's stop)
        and reported; operators not started stay so. The campaign report follows."""
        from pypto_tune.tools.campaign import control

        return await anyio.to_thread.run_sync(lambda: control.stop(control.find(campaign, known), force=force))
