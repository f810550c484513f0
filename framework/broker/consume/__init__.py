"""Consuming: pulls, consumer offsets, heartbeats and consumer groups, queue locks."""
