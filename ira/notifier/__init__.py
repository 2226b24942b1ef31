"""Delivery of notifications (C7): read what was committed, send it, keep the receipts."""
