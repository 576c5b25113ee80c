"""Contract suites, one per port: an abstract class holds the behaviour tests over a fixture
that builds the port; one subclass builds the in-memory fake (``tests/fakes``), one the real
adapter (PostgreSQL, Kafka, the test kube-apiserver). Both must pass the same tests, so a fake
cannot drift from what the real thing does. A behaviour a fake cannot reasonably model is tested
in the real subclass only, with the reason beside it."""
