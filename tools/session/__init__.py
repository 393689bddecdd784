"""The session's rules and memory: the append-only sealed ledger (``ledger``, ``ledger_seal``), the state derived
from it (``state``), the rules as data (``rules``) and the gates that refuse what they forbid (``gates``)."""
