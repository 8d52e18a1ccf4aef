"""Tests of the clients for hosts that are not Trio: plain threads, asyncio, anyio."""
