"""Tests for `agents.nudges`: conformance with the reference vectors, sequences, bad input."""
