"""The Kubernetes adapter: the only importer of kubernetes-asyncio.

- :mod:`.client`: the ``ApiClient`` factory (kubeconfig, in-cluster, ``~/.kube/config``);
- :mod:`.errors`: what a failed call raises, mapped from HTTP statuses and client exceptions;
- :mod:`.requests`: one raw request (``_preload_content=False``, orjson) for single objects;
- :mod:`.list_watch`: raw LIST (all pages) and WATCH (the body re-cut into lines);
- :mod:`.watch_apis`: the watcher's LIST/WATCH of Pods, Leases, Nodes and the DRA objects;
- :mod:`.taint_rules`: the enforcement reconciler's DeviceTaintRules;
- :mod:`.objects`: the recovery executor's Nodes, DRA objects, Jobs and ResourceClaims.

Every response is read raw and parsed with orjson, never into the client's model objects (75x
the memory and CPU per Pod, ``../shared/notes/stack.md``). The ports these classes implement are
declared by the processes that consume them (``watcher.pod_source.PodApi``,
``watcher.node_source.ObjectApi``, ``enforcement.kube.TaintRuleApi``,
``recovery.kube.KubeObjects``).
"""
