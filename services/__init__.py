"""The servers and processes the harness launches and reaps: a throwaway PostgreSQL, a Redis server, the shared-server base both use, and the process reaper."""
