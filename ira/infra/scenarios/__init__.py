"""Generated incidents in ira's bundle format, to measure the investigators on cases they were
not written for (``python -m ira.infra.scenarios OUT_DIR``; ``bench/investigation.py`` scores them)."""
