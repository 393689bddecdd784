"""Content loaded as package data: stage rules, catalogue, report templates."""
