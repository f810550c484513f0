"""The acting-master plugin's pure rules: no clock, no I/O."""
