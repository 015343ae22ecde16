"""Helpers shared by the test suites: real protocol peers on loopback."""
