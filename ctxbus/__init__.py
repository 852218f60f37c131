"""ctxbus: a local context that keeps what matters for each agent, and one brief that a
swarm of agents shares over NATS.

The packages, from the bottom up (each imports only those before it; the CLI in
`ctxbus.coordinator.cli` is the one place that joins them):

- `ctxbus.schemas`: the models of everything that crosses a process boundary or is stored;
- `ctxbus.bus`: everything NATS (the embedded server, the log, the buckets, leases);
- `ctxbus.agents`: the agent side (the local context, nudges, the brief's replica, the
  agent loop, the MCP server, the framework adapters, the Claude Code hooks);
- `ctxbus.coordinator`: the daemon that commits the brief, and the `ctxbus` command.

Nothing is imported here, so `import ctxbus.bus` costs only what `ctxbus.bus` needs;
`ctxbus._lazy`, which belongs to no package and which any may import, lets a package
load its names on first use.
"""
