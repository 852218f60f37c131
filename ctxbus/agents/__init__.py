"""The agent side: local context, nudges, brief replica, tools and runtime."""
