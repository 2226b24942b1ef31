"""Everything needed to stand ira up: the embedded broker and Redis for one machine, the
database migrations, the demo environment, Prometheus/Alertmanager configs and compose files.
"""
