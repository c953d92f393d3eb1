"""A module that defines no tool."""
