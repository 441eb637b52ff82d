# The settings `make up` runs with (sourced by scripts/up.sh): docker-compose.yml's (x-plimsoll-environment and
# its Compose variables), pointed at the local PostgreSQL, Redis and emulator; each one can be set in the shell
# first.

# Where each listens, and how the emulator and the worker run (Compose's names and defaults).
export PUBLISH_ADDRESS=${PUBLISH_ADDRESS:-127.0.0.1}
export API_PORT=${API_PORT:-8000} FLOWER_PORT=${FLOWER_PORT:-5555} EMULATOR_PORT=${EMULATOR_PORT:-8765}
export API_WORKERS=${API_WORKERS:-2} WORKER_CONCURRENCY=${WORKER_CONCURRENCY:-2} LOG_LEVEL=${LOG_LEVEL:-info}
export EMULATOR_LIMIT=${EMULATOR_LIMIT:-1000000} EMULATOR_TOKENIZER=${EMULATOR_TOKENIZER:-cl100k}
export EMULATOR_LATENCY=${EMULATOR_LATENCY:-0} EMULATOR_FAULT_RATE=${EMULATOR_FAULT_RATE:-0}
export EMULATOR_FAULT_KINDS=${EMULATOR_FAULT_KINDS:-429} EMULATOR_LOG_LEVEL=${EMULATOR_LOG_LEVEL:-warning}
export BEAT_SCHEDULE=${BEAT_SCHEDULE:-var/celerybeat-schedule}

# Plimsoll's settings (models/settings.py).
export PLIMSOLL_DATABASE_URL=${PLIMSOLL_DATABASE_URL:-postgresql+psycopg://${POSTGRES_USER:-plimsoll}@127.0.0.1:5432/${POSTGRES_DB:-plimsoll}}
export PLIMSOLL_BROKER_URL=${PLIMSOLL_BROKER_URL:-redis://127.0.0.1:6379/0}
export PLIMSOLL_QUEUE=celery
export PLIMSOLL_STEP_QUEUE=${PLIMSOLL_STEP_QUEUE:-plimsoll-steps}
export PLIMSOLL_SENTRY_ENVIRONMENT=${PLIMSOLL_SENTRY_ENVIRONMENT:-local}
# A service to try Plimsoll on, on one's own machine: the reproductions of old failures are allowed, as the
# README's journey shows one (a service for others leaves this off, its default).
export PLIMSOLL_ALLOW_REPRODUCTIONS=${PLIMSOLL_ALLOW_REPRODUCTIONS:-true}

# Where models go (models/endpoints.py): the emulator's own models to the emulator started here; a real model to
# its provider's API with the key in PLIMSOLL_ANTHROPIC_API_KEY or ANTHROPIC_API_KEY (OpenAI likewise), refused
# without one. The banner prints `plimsoll routes`: each provider's address and key, and where each came from.
export PLIMSOLL_EMULATOR_URL=${PLIMSOLL_EMULATOR_URL:-http://127.0.0.1:$EMULATOR_PORT}
export PLIMSOLL_DEFAULT_MODEL=${PLIMSOLL_DEFAULT_MODEL:-plimsoll-emulator}
