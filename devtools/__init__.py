"""Developer tools, not shipped in the wheel or the image: the local stack (:mod:`.stack`), the
test kube-apiserver (:mod:`.testenv`), the demo (:mod:`.demo`) and its bundled recorded streams
(``examples/``), and the configuration-reference generator (:mod:`.config_docs`).

``devicestate-dev stack|testenv|demo`` (:mod:`.cli`) runs them. The product never imports this
package (an import contract in ``pyproject.toml`` checks it)."""
