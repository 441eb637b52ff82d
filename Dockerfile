# The Plimsoll app image: the API, the Celery worker, Flower, the migrations and the model emulator all run
# from it (docker-compose.yml picks the command). Runtime dependencies only: no dev or bench extras.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The dependencies first, from the service's lock (exact versions and hashes, no dev or bench extras), so this
# layer is rebuilt only when the lock changes, not on every change to the code.
COPY pyproject.toml requirements/service.txt ./
RUN pip install --require-hashes --no-deps --requirement service.txt \
    && rm service.txt

# Then the project itself. The source tree stays in /app too: alembic.ini and migrations/ are read from here
# by `alembic upgrade head`, and `plimsoll demo` writes its SQLite file to /app/var. The estimate's pass in C
# (plimsoll/_scan.c) is compiled by a gcc installed and removed in this one layer; the built module is copied
# beside the source too, since processes started in /app import the package from there first.
COPY . .
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-deps --no-build-isolation . \
    && cp "$(python -I -c 'import plimsoll._scan as m; print(m.__file__)')" plimsoll/ \
    && apt-get purge -y --auto-remove gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/* build ./*.egg-info \
    && useradd --create-home --uid 10001 --user-group plimsoll \
    && mkdir -p var \
    && chown plimsoll:plimsoll var

USER plimsoll

EXPOSE 8000
CMD ["uvicorn", "api.app:app", "--host", "0.0.0.0", "--port", "8000"]
