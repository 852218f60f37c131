"""Tail hygiene, nudge bands, Channel 1 reminders and Channel 2 delivery."""
