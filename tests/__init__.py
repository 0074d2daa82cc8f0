"""Tests of the template: bakes and the generated project's own gates."""
