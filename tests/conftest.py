"""Shared test configuration: markers and session-wide fixtures."""
