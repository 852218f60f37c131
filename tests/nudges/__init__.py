"""Tests for `ctxbus.agents.nudges`: conformance with the reference vectors, sequences, bad input."""
