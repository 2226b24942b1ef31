"""The incident workflow ``incident-diagnosis@1``: delegate, join, synthesize, ask for
approval, create the ticket exactly once, verify, complete (DESIGN.md §1 steps 3-10)."""
