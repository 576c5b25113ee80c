"""The Faust stream worker: dedup device-health events from Kafka into the PostgreSQL projection."""
