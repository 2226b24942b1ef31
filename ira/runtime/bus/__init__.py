"""The Kafka bus: topic admin, the shared producer and the consumer runner every role uses.

Kafka is a wake-up and transport, never the authority (DESIGN.md §4): producers publish after
the state they announce is committed (outbox), consumers apply each message at most once by
remembering its ``message_id`` in the inbox in the same transaction as the effect, and commit
the offset only afterwards. Poison goes to the DLQ instead of blocking a partition, and a
record failing transiently for longer than ``consumer.max_hold`` is parked in the store. aiokafka
errors are translated to :class:`~ira.core.errors.BrokerUnavailableError` at this seam.

* ``admin``     ensure_topics / missing_topics / topics_exist
* ``producer``  BusProducer (publish, publish_many, publish_together, publish_raw)
* ``together``  TogetherPublisher: concurrent callers of one loop turn share one producer pass
* ``consumer``  ConsumerRunner (ConsumerSettings from ``options``)
* ``options``   ConsumerSettings: fetch, batch, retry backoff, max_hold, park poll
* ``inbox``     InboxApplier, record_inbox_many, BatchHooks: inbox rows + handler in one transaction
* ``park``      the hold budget, the park of failing records and their re-drive
* ``record``    RecordMeta, handler types, Outcome, ConsumerStats, the retry / park / drop / DLQ decision
* ``tracing``   traceparent in and out of Kafka headers (the bus's own PRODUCER/CONSUMER spans)
"""
