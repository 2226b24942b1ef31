"""Bounded investigators: one loop per branch step, under the coordinator's binding."""
