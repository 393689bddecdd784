"""The session's rules and memory: the append-only sealed ledger (``ledger``, ``ledger_seal``), the state derived
from it (``state``) and the rules as data (``rules``); the gates that refuse what they forbid are in ``tools/rules``."""
