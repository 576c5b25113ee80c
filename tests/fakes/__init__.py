"""In-memory fakes of the ports, one module per port, each held to its real adapter by the
contract suites (``tests/contracts``)."""
