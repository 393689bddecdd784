"""patching."""
