"""Campaigns (issue #19): tune a whole operator library, each operator a full gated session driven by the server's
own search, on the local pool or a Ray cluster, with a live board, a final report and resumption after a crash.

Floors: this package sits above ``tools/operations`` (it drives sessions through the ``TuningService`` facade, never
around its gates) and below ``server/`` (the CLI's ``pypto-tune campaign`` and the MCP tools ``start_campaign`` /
``campaign_status`` / ``stop_campaign`` call it).

* ``manifest``  — what to tune: a TOML/YAML manifest or a folder of operators → ``CampaignSpec``;
* ``journal``   — the campaign's folder and its append-only journal of events;
* ``facts``     — what a session's ledger says (the only truth the board, budgets and resume read);
* ``driver``    — one operator's session, step by step as the gates allow;
* ``resilient`` — a run lost with its Ray node runs again elsewhere;
* ``scheduler`` — the campaign: concurrency, budgets, stop, resume;
* ``board`` / ``report`` — live progress (terminal, JSON, refreshing HTML) and the final report (zh/en);
* ``control``   — start / status / stop for the MCP tools (a detached driver process).
"""
