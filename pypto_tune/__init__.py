"""pypto-tune: an MCP server that keeps PyPTO operator tuning honest.

Layout (see README): ``pypto_tune.server`` is the thin MCP adapter (folder ``server/``), ``pypto_tune.tools`` the
domain library without MCP imports (folder ``tools/``), ``pypto_tune.prompts`` the content (folder ``prompts/``).
"""

__version__ = "0.1.0"
