"""The shared language of ira: boundary models, state machines, errors, envelopes, ports.

Pure by construction: nothing here imports an I/O library (no SQL, Kafka, Redis, HTTP), so
every rule can be tested without a running system and every role agrees on one vocabulary.
"""
