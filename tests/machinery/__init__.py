"""Tests of the generated job."""
