"""The coordinator daemon and the `ctxbus` command line."""
