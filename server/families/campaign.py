"""Campaign family: start, watch and stop a campaign over an operator library (``tools/campaign/control.py``).

A campaign runs as its own process (``pypto-tune campaign``), not inside this server: it outlives a client's
connection and is watched through its folder. Each of its sessions goes through the same gates and ledger as an
agent's; while it runs, a ``start_session`` on one of its workspaces from this server attaches read-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.types import ToolAnnotations
from pydantic import Field
from pypto_tune.server.wiring import RO, Wiring
from pypto_tune.tools.campaign.control import CampaignView

STARTS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
STOPS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

Campaign = Annotated[str, Field(description="the campaign's folder (or its id, if this server started it)")]
OPTIONS = ("the CLI's options: goal_speedup | goal_target_us, copy_to, trials, wall_h (a folder of operators); "
           "batch, concurrency, trials_total, wall_h_total")


def register(w: Wiring) -> None:
    known: dict[str, Path] = {}  # campaign id -> folder, for campaigns this server started

    @w.reg.tool(title="Start (or resume) a campaign over an operator library", annotations=STARTS,
                result=CampaignView)
    async def start_campaign(
        manifest: Annotated[str, Field(description="absolute path: a manifest (.toml/.yaml) or a folder of "
                                       "operators")],
        out: Annotated[str | None, Field(description="the campaign's folder (default beside the manifest)")] = None,
        executor: Annotated[Literal["local", "ray"], Field(description="where runs execute")] = "local",
        ray_address: Annotated[str | None, Field(description="executor=ray: the head's HOST:PORT")] = None,
        resume: Annotated[bool, Field(description="continue the campaign in `out`")] = False,
        knowledge: Annotated[str | None, Field(description="a knowledge store file")] = None,
        options: Annotated[dict[str, Any] | None, Field(description=OPTIONS)] = None,
    ) -> CampaignView:
        """Tune every operator of a manifest or folder, each a gated session driven by the server's search, within
        budgets, as a process of its own; returns at once."""
        from pypto_tune.tools.campaign import control

        result = await anyio.to_thread.run_sync(lambda: control.start(
            manifest, base=w.holder.workspace, out=out, executor=executor, ray_address=ray_address, resume=resume,
            knowledge=knowledge, options=dict(options or {})))
        known[result.campaign_id] = Path(result.folder)
        return result

    @w.reg.tool(title="Campaign board", annotations=RO, result=CampaignView)
    async def campaign_status(campaign: Campaign) -> CampaignView:
        """The campaign's board: operators done, running, queued, failed; best speed-up; trials; time left; the
        report once it has ended."""
        from pypto_tune.tools.campaign import control

        return await anyio.to_thread.run_sync(lambda: control.view(control.find(campaign, known)))

    @w.reg.tool(title="Stop a campaign", annotations=STOPS, result=CampaignView)
    async def stop_campaign(
        campaign: Campaign,
        force: Annotated[bool, Field(description="cancel the running steps (sessions stay resumable)")] = False,
    ) -> CampaignView:
        """Stop a campaign: running sessions finish their step, are stopped (the user's stop) and reported."""
        from pypto_tune.tools.campaign import control

        return await anyio.to_thread.run_sync(lambda: control.stop(control.find(campaign, known), force=force))
