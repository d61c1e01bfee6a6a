"""Imports every built-in experiment module so that they register themselves."""
