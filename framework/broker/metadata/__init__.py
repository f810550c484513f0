"""The topic table and the broker's JSON config files (``config/*.json``)."""
