"""DRA inventory and device identity: the pure core (issue 4).

- :mod:`.objects`: ResourceSlice, ResourceClaim and DeviceClass (resource.k8s.io/v1) read into
  compact frozen records;
- :mod:`.identity`: which physical device an ``allocatedResourcesStatus`` entry is;
- :mod:`.capacity`: total / allocated / idle / unavailable / fragmented per node, pool,
  DeviceClass and namespace.
"""
