"""The fault matrix (issue 18): real ira processes, killed and stopped at chosen boundaries."""
