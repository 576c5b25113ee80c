"""``devicestate alerts``: governance decisions -> Alertmanager (issue 3, item 7).

- :mod:`.mapping`: the pure Decision -> Alertmanager v2 alert mapping and the fold of what fires;
- :mod:`.sender`: the HTTP client (httpx, retries with tenacity);
- :mod:`.service`: the Kafka consumer loop (offsets committed after delivery);
- :mod:`.metrics`, :mod:`.cli`.
"""
