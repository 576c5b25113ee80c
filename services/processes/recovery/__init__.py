"""``devicestate recovery``: the executor side of staged recovery (issue 3, item 5).

- :mod:`.checks`: what a check is (:class:`~.checks.RecoveryCheck`) and answers, the
  :class:`~.checks.Executor` protocol;
- :mod:`.executors`: :class:`~.executors.InProcessExecutor` and
  :class:`~.executors.KubernetesJobExecutor`;
- :mod:`.manifests`: the pure Job and ResourceClaim builders;
- :mod:`.kube`: the Kubernetes calls (port and kubernetes-asyncio adapter), with the RBAC needed;
- :mod:`.service`: the lease flow over the decisions and governance topics;
- :mod:`.metrics`, :mod:`.cli`.
"""
