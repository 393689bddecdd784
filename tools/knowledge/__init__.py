"""Knowledge that carries over (issue #19): a store distilled from ledgers, shared as one file, read by the search.

* ``store``     — the file format (observations, their sources, the seed rules), read / merge / write;
* ``situation`` — what a change does to a kernel, in quantities every operator shares (the one definition of
  "similar");
* ``match``     — from observations to a prior for one candidate (nearest measured changes);
* ``distill``   — from a ledger to observations (reads the session floor; nothing below imports it);
* ``commands``  — ``pypto-tune knowledge export|import|show``.

The search reads the store through ``tools/search/priors.load_priors`` (the hand-written rules are the store's seed).
"""
