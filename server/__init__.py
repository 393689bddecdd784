"""Thin MCP adapter: transport, tool registration, schemas, error mapping."""
