"""``devicestate enforce``: quarantines enforced through DRA DeviceTaintRules (issue 4, item 5a).

Off unless ``enforce_device_taint_rules``; dry-run (``dryRun=All``) unless ``enforce_dry_run`` is
false; ``NoSchedule`` unless ``enforce_no_execute``. One ``resource.k8s.io/v1beta2``
DeviceTaintRule per active or recovering quarantine of a DRA device (``driver/pool/device``),
deleted when the quarantine is released; only rules carrying devicestate's labels are ever
changed. See docs/enforcement.md.

- :mod:`.desired`: the pure part: quarantine rows -> desired rules (manifests, names, labels) and
  the plan (create, update, delete) against the rules present;
- :mod:`.source`: the quarantines from the PostgreSQL governance projection;
- :mod:`.kube`: DeviceTaintRule calls (port and kubernetes-asyncio adapter);
- :mod:`.reconciler`: one pass;
- :mod:`.triggers`: the decisions that trigger an early pass, and the expectations they set;
- :mod:`.run`: the loop (interval + decisions topic, SIGTERM);
- :mod:`.metrics`, :mod:`.cli`.

RBAC (cluster-scoped: a ClusterRole bound to the service's ServiceAccount)::

    - apiGroups: ["resource.k8s.io"]
      resources: ["devicetaintrules"]
      verbs: ["list", "create", "update", "delete"]

exactly what the reconciler calls (list with a label selector, create, replace, delete with a uid
precondition); a dry-run write needs the same verb as a real one. ``get``, ``watch`` and
``patch`` are not used (granting them does no harm; ``tests/kubeapi/test_enforcement.py`` runs
the reconciler with the four verbs only). The API server must serve ``resource.k8s.io/v1beta2``
with the ``DRADeviceTaintRules`` feature gate on (both off by default in Kubernetes 1.36).
The reconciler also reads PostgreSQL (``quarantines``, ``device_governance``) and, optionally,
the decisions topic.
"""
