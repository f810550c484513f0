"""Admin views: runtime info and consume stats."""
