"""The real stack the tests and the benchmarks start (``stack.py``): a fresh migrated PostgreSQL database, Redis,
a Celery worker, the API and the emulator, all talking over their real protocols. Tests and benchmarks import it;
it imports neither, and the service never imports it."""
