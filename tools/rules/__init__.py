"""Every rule the server enforces, as pure decisions: each module returns (or raises) the ``GateRefusal`` of its rule
ids and nothing else happens inside — no ledger row, file, process or log line. The callers act on the answer.

``gates`` holds the per-call table (rule id → which calls → when → message → hint → next calls); the other modules
hold the rules decided elsewhere in a call, one module per concern, and each rule id is refused from one module only.
"""
