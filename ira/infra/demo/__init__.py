"""The demo environment: an order-service to investigate, its Prometheus rules and
Alertmanager config, runbooks, and the bundled scenario ALR-20260429-017."""

from __future__ import annotations

from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent
RUNBOOKS_DIR = DEMO_DIR / "runbooks"
BUNDLES_DIR = DEMO_DIR / "bundles"
DEMO_BUNDLE = BUNDLES_DIR / "ALR-20260429-017"
SERVICE = "order-service"
