"""Kafka adapter: the only package that imports aiokafka.

- :mod:`.clients`: the client factory (``make_producer``, ``make_consumer``, ``make_admin`` from
  :class:`~services.runtime.config.KafkaSettings` or a bootstrap string), the shared start-up retry
  and the error classification (``is_retriable``, ``is_broker_unavailable``);
- :mod:`.follow`: :class:`~.follow.TopicFollower`, the "follow a topic" loop of the alert
  sender, the recovery executor and the enforcer;
- :mod:`.reader`: :class:`~.reader.TopicSnapshot` (a topic from its beginning up to the end
  captured at the start: the replays) and the admin questions (partitions, group members, lag);
- :mod:`.headers`: the record headers (the record type, the dead-letter reason);
- :mod:`.producer`: the watcher's producer; :mod:`.topics`: topic creation and the start-up
  check of every process (what each topic must be: :mod:`.topic_check`);
- :mod:`.lag`: a consumer group's true lag from the broker (records and seconds per partition).
"""
