"""Fault, bad-input and security tests across the whole pipeline."""
