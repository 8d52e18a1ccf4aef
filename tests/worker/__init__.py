"""Tests of the durable layer: several runtimes sharing one store."""
