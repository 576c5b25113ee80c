"""``devicestate recovery``: the executor side of staged recovery (issue 3, item 5).

- :mod:`.checks`: what a check is (:class:`~.checks.RecoveryCheck`) and answers, the
  :class:`~.checks.Executor` protocol;
- :mod:`.executors`: :class:`~.executors.InProcessExecutor` and
  :class:`~.executors.KubernetesJobExecutor`;
- :mod:`.manifests`: the pure Job and ResourceClaim builders;
- :mod:`.dra_devices`: which DRA device a check is about (ResourceSlices, claims, CEL selector);
- :mod:`.kube`: the Kubernetes calls (port and kubernetes-asyncio adapter), with the RBAC needed;
- :mod:`.stages`: the stage a ``RecoveryStageStarted`` decision asks to run;
- :mod:`.service`: the lease flow over the decisions (lease requests, checks, reports);
- :mod:`.publisher`: lease requests and reports appended to the governance topic;
- :mod:`.run`: the Kafka loop over the decisions topic (catch-up, commits, shutdown);
- :mod:`.metrics`, :mod:`.cli`.
"""
