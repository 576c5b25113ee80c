"""Kafka adapters: topic administration (``topics``) and the watcher's producer (``producer``)."""
