"""DRA inventory and device identity: the pure core (issue 4).

- :mod:`.objects`: ResourceSlice, ResourceClaim and DeviceClass (resource.k8s.io/v1) read into
  compact frozen records; :mod:`.events`: ``InventoryObserved`` and its wire form;
- :mod:`.identity`: which physical device an ``allocatedResourcesStatus`` entry is;
- :mod:`.state` and :mod:`.fold`: the inventory the worker keeps, and how each record changes it;
- :mod:`.snapshot`: the projection rows the views read; :mod:`.directory`: every device with its
  identity, health, governance state and holders;
- :mod:`.capacity`: total / allocated / idle / unavailable / fragmented per node, pool,
  DeviceClass and namespace, over plain records; :mod:`.capacity_report`: those views over a
  snapshot; :mod:`.reconcile`: ResourceSlices against Node capacity.
"""
