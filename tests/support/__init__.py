"""What the tests build their nodes from: node builders (a sysfs tree, a snapshot, a whole fake node), the fakes under
the real vendor bindings (fakes/), and helpers several test modules share. tests/README.md names each builder."""
