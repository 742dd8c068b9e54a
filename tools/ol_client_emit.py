"""Emits OpenLineage RunEvents to a TraqLyte server with the official Python client
(openlineage-python, installed by scripts/python-venv.sh), exactly as an integration would.

Sent, in order:
  1. START and COMPLETE for a chain of jobs: raw -> chain.stage -> staged -> chain.mart ->
     mart -> chain.report -> report (6 events, each a new row).
  2. The COMPLETE of chain.report again with a later eventTime: a producer retry (a duplicate).
  3. Two COMPLETE events of one run of params.job that differ only in the nominalTime run
     facet, a parameter (2 new rows).
Steps 2 and 3 go through a second client configured with `compression: gzip`
(`Content-Encoding: gzip` bodies), so the retry in step 2 also shows that a compressed
body is identified as its plain twin.

Prints a JSON summary on stdout. Usage: ol_client_emit.py URL API_KEY
"""

import json
import sys
import uuid
from datetime import datetime, timedelta, timezone

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import nominal_time_run
from openlineage.client.transport.http import ApiKeyTokenProvider, HttpCompression, HttpConfig, HttpTransport

NAMESPACE = "ol-client-test"
DATASETS = "warehouse"
PRODUCER = "https://github.com/OpenLineage/OpenLineage/tree/1.54.0/client/python"
START = datetime(2026, 11, 29, 3, 0, 0, tzinfo=timezone.utc)


def client(url, key, compression=None):
    config = HttpConfig(
        url=url, auth=ApiKeyTokenProvider({"apiKey": key}), timeout=30.0, compression=compression
    )
    return OpenLineageClient(transport=HttpTransport(config))


def event(state, run_id, job, inputs, outputs, at, run_facets=None):
    return RunEvent(
        eventType=state,
        eventTime=at.isoformat(),
        run=Run(runId=run_id, facets=run_facets or {}),
        job=Job(namespace=NAMESPACE, name=job),
        producer=PRODUCER,
        inputs=[InputDataset(namespace=DATASETS, name=name) for name in inputs],
        outputs=[OutputDataset(namespace=DATASETS, name=name) for name in outputs],
    )


def chain(ol):
    steps = [("chain.stage", "raw", "staged"), ("chain.mart", "staged", "mart"), ("chain.report", "mart", "report")]
    last = None
    for index, (job, source, target) in enumerate(steps):
        run_id = str(uuid.uuid4())
        at = START + timedelta(minutes=10 * index)
        ol.emit(event(RunState.START, run_id, job, [source], [target], at))
        last = event(RunState.COMPLETE, run_id, job, [source], [target], at + timedelta(minutes=5))
        ol.emit(last)
    return last


def retry(ol, complete):
    again = event(
        RunState.COMPLETE,
        complete.run.runId,
        complete.job.name,
        [d.name for d in complete.inputs],
        [d.name for d in complete.outputs],
        START + timedelta(hours=1, seconds=7),
    )
    ol.emit(again)


def parameter_runs(ol):
    run_id = str(uuid.uuid4())
    for day in ("2026-11-28", "2026-11-29"):
        facet = nominal_time_run.NominalTimeRunFacet(nominalStartTime=f"{day}T03:00:00Z")
        ol.emit(event(RunState.COMPLETE, run_id, "params.job", ["raw"], ["params.out"], START, {"nominalTime": facet}))


def main():
    url, key = sys.argv[1], sys.argv[2]
    ol = client(url, key)
    complete = chain(ol)
    compressed = client(url, key, HttpCompression.GZIP)
    retry(compressed, complete)
    parameter_runs(compressed)
    print(json.dumps({"emitted": 10, "expected_rows": 8, "expected_duplicates": 1}))


if __name__ == "__main__":
    main()
