"""The recorded code and its changes: the workspace's layout and path rules (``workspace``), the whole-tree code
state and blob store (``codestate``), and the one admission path every change passes (``admission``). The knob model
and source transforms it builds on are in ``tools/patching``."""
