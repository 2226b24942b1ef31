"""Adapters to outside systems; each implements a port from ``ira.core.ports``."""
