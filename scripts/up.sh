#!/usr/bin/env bash
# `make up`: the whole service on this machine without Docker. The settings are docker-compose.yml's
# (x-plimsoll-environment and its Compose variables), pointed at the local PostgreSQL, Redis and emulator; each
# one can be set in the shell first. Then: the database and its role if missing, the migrations, and the
# Procfile's emulator, API, worker (with Celery beat) and Flower under honcho. Ctrl-C stops them all.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/${VENV:-.venv}/bin:$PATH"

source scripts/up-settings.sh

# A port in use (most often by a `make up` still running) ends here, naming it, before anything is started or
# printed; bound as uvicorn, Flower and the emulator bind (SO_REUSEADDR: a port in TIME_WAIT is free).
for setting in API_PORT:$PUBLISH_ADDRESS EMULATOR_PORT:$PUBLISH_ADDRESS FLOWER_PORT:127.0.0.1; do
  name=${setting%%:*} address=${setting#*:}
  if ! python -c 'import socket, sys
with socket.socket() as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2])))' "$address" "${!name}" 2>/dev/null; then
    echo "Port ${!name} on $address ($name) is in use: is Plimsoll running already (another make up)? Stop it, or pick another port, e.g. $name=$(( ${!name} + 1 )) make up" >&2
    exit 1
  fi
done

# Flower's login, in its environment (never on a command line, where `ps` shows it): FLOWER_BASIC_AUTH, else
# FLOWER_USER and FLOWER_PASSWORD, else admin with a password made once and kept in var/flower-password.
mkdir -p var "$(dirname "$BEAT_SCHEDULE")"
if [ -z "${FLOWER_BASIC_AUTH:-}" ]; then
  if [ -n "${FLOWER_USER:-}" ] && [ -n "${FLOWER_PASSWORD:-}" ]; then
    FLOWER_BASIC_AUTH="$FLOWER_USER:$FLOWER_PASSWORD"
  else
    [ -s var/flower-password ] || (umask 077 && python -c "import secrets; print(secrets.token_hex(16))" >var/flower-password)
    FLOWER_BASIC_AUTH="admin:$(cat var/flower-password)"
  fi
fi
export FLOWER_BASIC_AUTH

python scripts/ensure_database.py
python -m alembic upgrade head

database=$(python -c "import os; from sqlalchemy.engine import make_url; print(make_url(os.environ['PLIMSOLL_DATABASE_URL']))")
cat <<BANNER
Plimsoll is starting; Ctrl-C stops everything.
  API       http://$PUBLISH_ADDRESS:$API_PORT  (OpenAPI at /docs)
  Flower    http://127.0.0.1:$FLOWER_PORT  login ${FLOWER_BASIC_AUTH%%:*} / ${FLOWER_BASIC_AUTH#*:}
  emulator  http://$PUBLISH_ADDRESS:$EMULATOR_PORT
  models    default $PLIMSOLL_DEFAULT_MODEL; where each goes (plimsoll routes):
$(plimsoll routes | sed 's/^/            /')
  database  $database
  broker    $PLIMSOLL_BROKER_URL, queue $PLIMSOLL_STEP_QUEUE
From another shell: export PLIMSOLL_API_URL=http://127.0.0.1:$API_PORT, and PLIMSOLL_DATABASE_URL (above) for
\`plimsoll tenant create NAME\`.
BANNER
# Ctrl-C reaches honcho, which stops every process and exits 130; make would report that as "Error 130". So a
# Ctrl-C ends here, once honcho is done, with one line and status 0; any other end keeps honcho's status. (The
# trap keeps this shell alive until then; where SIGINT was ignored when it started, e.g. `make up &` from a
# script, the trap cannot be set and honcho's 130 alone says so.)
interrupted=0
trap 'interrupted=1' INT
status=0
# -e /dev/null: the settings are the ones above, not Compose's .env (Plimsoll still reads PLIMSOLL_* lines of
# .env for what is not set here).
honcho start --procfile Procfile --env /dev/null || status=$?
if [ "$interrupted" = 1 ] || [ "$status" = 130 ]; then
  echo "Plimsoll stopped (Ctrl-C): the emulator, the API, the worker and Flower are down." >&2
  exit 0
fi
exit "$status"
