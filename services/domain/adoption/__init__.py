"""DRA adoption, pool by pool (issue 16): the facts of a pool read from the inventory
(:mod:`.facts`), the rollout gate (:mod:`.gate`) and the driver failure classes
(:mod:`.failure_classes`). The operator's declarations of each pool's
path and phase live on the governance log (:mod:`services.domain.governance.adoption`). Pure: no
I/O, no clock (time is the governor's event time)."""
