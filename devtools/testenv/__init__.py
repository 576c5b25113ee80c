"""Test environments built from the package registries: a real kube-apiserver + etcd
(:mod:`devtools.testenv.kubeapi`), driven by ``devicestate-dev testenv`` (:mod:`devtools.testenv.cli`).
"""
