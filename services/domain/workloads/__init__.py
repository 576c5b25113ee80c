"""Workloads in the directory (issue 13 item 1): each Pod holding devices with its controller
chain (``owners``), its migration class (``migration``), the health-topic record that carries
both (``events``, wire form ``codec``) and the fold the projection applies (``fold``)."""
