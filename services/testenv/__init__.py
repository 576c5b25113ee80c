"""Test environments built from the package registries: a real kube-apiserver + etcd
(:mod:`services.testenv.kubeapi`), driven by ``devicestate testenv`` (:mod:`services.testenv.cli`).
"""
