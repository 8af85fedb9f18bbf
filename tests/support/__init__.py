"""What the test suites share: builders, scenarios, backends, servers and processes."""
