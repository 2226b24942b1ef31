"""Replays (DESIGN.md §8): a bundle's source events republished into ``staging``, compared with the original.

``POST /v1/replays`` stores a replay and the bundle's recording (an artifact); the role's loop
sends the events through the normal ingest path (the gateway's source endpoints) marked
``environment=staging`` and labelled with the replay and the recording, watches the run they
start and, once it settles, stores the comparison with the original outcome and the verdict.
Staging branches answer from the recording (see ``agents.main.StagingRecordings``). This
package talks to the others only through HTTP, topics and the store.
"""
