"""The broker's role: the HA service, role changes, controller mode and the confirm
offset checkpoint."""
