"""Domain library (no MCP imports): session rules, runner, ledger, analysis, patching, reports."""
