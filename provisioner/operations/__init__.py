"""The commands that change a running cluster node by node: replace-node, upgrade, drain and
resume, on one node-lifecycle library."""
