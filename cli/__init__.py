"""The ``plimsoll`` command line: one module per command group. It uses api/ and worker/; they do not import it.

Results go to standard output (a job id, an answer, a table, or with ``--json`` one JSON document); progress and
messages go to standard error. Exit codes: 0 done, 1 the job did not succeed or the request was refused, 2 usage."""
