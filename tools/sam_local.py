"""The checks of tools/sam-local: lifeboat's seven functions under `sam local`.

Run by tools/sam-local (with the pinned venv's python, which has boto3 from
moto and SAM CLI's own YAML reader) once podman serves the Docker API, the
base image is there, the functions are built for this machine and moto
listens on the podman bridge's gateway address:

    python tools/sam_local.py --moto http://GATEWAY:PORT --host-address GATEWAY \
        --build-dir .aws-sam/host-build --state target/sam-local --arch x86_64 [--api]

It provisions in moto what the template declares for the functions (the
Requests tables of nordic and baltic with their streams and mappings, the
Breaker, Cache, Carts, Orders and SaleStatus tables, the bus with
BreakerStateChangedRule, the queues), serves a stub operator API beside moto
(search, price, and a book that takes each idempotency key once), and
invokes every function with `sam local invoke` on the payloads of
tests/events/, checking each answer and what the function wrote to moto.
`sam local invoke` exits 0 when the function fails, so an answer with
`errorType`, no answer (a function that did not start), an HTTP status or a
report other than the one expected, or a missing write fails the run. With
--api it then serves search and cart with `sam local start-api`, takes a
search and two cart steps over HTTP, and (--contract-examples N) runs
schemathesis against it with docs/api.json. Prints one line per invocation
(function, event, seconds, result) and exits non-zero on any failure.
"""

import argparse
import copy
import http.server
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "tests" / "events"
REGION = "us-east-1"
OPERATORS = ["nordic", "baltic"]
PREFIX = "lifeboat.requests."
NAMES = {
    "breaker": "lifeboat-breaker",
    "cache": "lifeboat-cache",
    "carts": "lifeboat-carts",
    "orders": "lifeboat-orders",
    "sale_status": "lifeboat-sale-status",
    "bus": "lifeboat-events",
}
ALARM = "lifeboat-nordic-errors"


class Failed(Exception):
    """A check that did not hold."""


def file_name(function, label):
    """`function` and `label` as one file name: no '/', no spaces."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{function}-{label}").strip("_")


def shown(path):
    """`path` as the run's lines name it: from the repository root."""
    try:
        return path.relative_to(ROOT)
    except ValueError:
        return path


def check(condition, message):
    if not condition:
        raise Failed(message)


# ------------------------------------------------------------ stub operator


class Operator(http.server.BaseHTTPRequestHandler):
    """The operator API contract (crates/operator/src/client.rs): GET
    {base}/search?... answers {"sailings": [...]}, GET {base}/price?... a
    price object whose parts add up. The base is /<operator>."""

    calls = []
    # Answers PUT to a presigned URL (the capacity check's), as CloudFormation's
    # S3 bucket would take them.
    responses = []

    def do_PUT(self):
        length = int(self.headers.get("content-length", "0"))
        Operator.responses.append((self.path, json.loads(self.rfile.read(length) or b"{}")))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")
        Operator.calls.append((parts, params))
        passengers = int(params.get("passengers", "1"))
        if parts[-1] == "search":
            date = params.get("date", "2026-12-24").replace("-", "")
            body = {
                "sailings": [
                    {
                        "sailing_id": f"NRD-{params.get('from')}-{params.get('to')}-{date}-{hhmm}",
                        "departs": f"{params.get('date')}T{hhmm[:2]}:{hhmm[2:]}:00Z",
                        "arrives": f"{params.get('date')}T{int(hhmm[:2]) + 2:02}:{hhmm[2:]}:00Z",
                        "from": params.get("from"),
                        "to": params.get("to"),
                        "price_cents": 3900 * passengers,
                        "currency": "EUR",
                    }
                    for hhmm in ("0730", "1630")
                ]
            }
        elif parts[-1] == "price":
            fare = 3900 * passengers
            body = {
                "price": {
                    "amount_cents": fare,
                    "currency": "EUR",
                    "sailing_id": params.get("sailing_id"),
                    "passengers": passengers,
                    "parts": [{"kind": "fare", "amount_cents": fare}],
                }
            }
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # The bookings taken, by idempotency key: a key sent again is answered
    # with its booking and books nothing more (docs/operator-api.json).
    bookings = {}

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        length = int(self.headers.get("content-length", "0"))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self.send_error(400)
            return
        Operator.calls.append((parts, body))
        key = self.headers.get("idempotency-key")
        if parts[-1] != "book":
            self.send_error(404)
            return
        if not key or not isinstance(body.get("passengers"), int):
            self.send_error(400)
            return
        if key not in Operator.bookings:
            Operator.bookings[key] = {
                "status": "booked",
                "booking_ref": f"BK{len(Operator.bookings) + 1:06d}",
                "price_cents": 3900 * body["passengers"],
                "currency": body.get("currency", "EUR"),
            }
        data = json.dumps(Operator.bookings[key]).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def serve_operator(address):
    server = http.server.ThreadingHTTPServer((address, 0), Operator)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# ------------------------------------------------------------------ moto


def provision(moto):
    """What the template declares, as the functions see it. Returns the
    resources the functions' environment names."""
    kw = dict(
        endpoint_url=moto,
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    ddb = boto3.client("dynamodb", **kw)
    sqs = boto3.client("sqs", **kw)
    events = boto3.client("events", **kw)
    iam = boto3.client("iam", **kw)
    lam = boto3.client("lambda", **kw)

    def table(name, keys, stream=False):
        attrs = [{"AttributeName": k, "AttributeType": "S"} for k in keys]
        schema = [
            {"AttributeName": k, "KeyType": t}
            for k, t in zip(keys, ["HASH", "RANGE"], strict=False)
        ]
        extra = {}
        if stream:
            extra["StreamSpecification"] = {
                "StreamEnabled": True,
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            }
        return ddb.create_table(
            TableName=name,
            AttributeDefinitions=attrs,
            KeySchema=schema,
            BillingMode="PAY_PER_REQUEST",
            **extra,
        )["TableDescription"]

    streams = {
        op: table(PREFIX + op, ["request_id"], stream=True)["LatestStreamArn"] for op in OPERATORS
    }
    table(NAMES["breaker"], ["operator", "item"])
    table(NAMES["cache"], ["cache_key"])
    table(NAMES["carts"], ["cart_id"])
    # OrdersTable: pk, and the sparse index of open orders (docs/orders.md).
    ddb.create_table(
        TableName=NAMES["orders"],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "open_operator", "AttributeType": "S"},
            {"AttributeName": "open_at", "AttributeType": "N"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "open-by-operator",
                "KeySchema": [
                    {"AttributeName": "open_operator", "KeyType": "HASH"},
                    {"AttributeName": "open_at", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    table(NAMES["sale_status"], ["operator"])
    events.create_event_bus(Name=NAMES["bus"])

    def queue(name, attributes=None):
        url = sqs.create_queue(QueueName=name, Attributes=attributes or {})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return url, arn["Attributes"]["QueueArn"]

    offsale_url, offsale_arn = queue("lifeboat-offsale", {"VisibilityTimeout": "90"})
    # BreakerStateChangedRule: the switch's Breaker State Changed events
    # reach OffsaleQueue (moto delivers a rule's events to an SQS target).
    events.put_rule(
        Name="lifeboat-breaker-state-changed",
        EventBusName=NAMES["bus"],
        EventPattern='{"source": ["lifeboat"], "detail-type": ["Breaker State Changed"]}',
    )
    events.put_targets(
        Rule="lifeboat-breaker-state-changed",
        EventBusName=NAMES["bus"],
        Targets=[{"Id": "offsale-queue", "Arn": offsale_arn}],
    )
    timer_url, _ = queue("lifeboat-breaker-timer", {"VisibilityTimeout": "30"})
    _, failed_arn = queue("lifeboat-requests-failed")

    # The consumers as moto knows them, for the lanes' mappings the circuit
    # switch finds and re-points (their code never runs in moto: tools/sam-local
    # starts moto without its own stream delivery).
    role = iam.create_role(
        RoleName="lifeboat-consumer",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    functions = {}
    for name in ("real-consumer", "fallback-consumer"):
        functions[name] = lam.create_function(
            FunctionName=name,
            Runtime="provided.al2023",
            Role=role,
            Handler="bootstrap",
            Code={"ZipFile": b"PK\x05\x06" + b"\0" * 18},
        )["FunctionArn"]
    for stream in streams.values():
        lam.create_event_source_mapping(
            EventSourceArn=stream,
            # by name: moto lists a function's mappings only under the
            # name they were created with
            FunctionName="real-consumer",
            StartingPosition="LATEST",
            BatchSize=50,
            FilterCriteria={
                "Filters": [
                    {
                        "Pattern": '{"eventName": ["INSERT"], "dynamodb": {"NewImage": {"record_type": {"S": ["request"]}}}}'
                    }
                ]
            },
            FunctionResponseTypes=["ReportBatchItemFailures"],
            DestinationConfig={"OnFailure": {"Destination": failed_arn}},
        )
    return {
        "ddb": ddb,
        "lambda": lam,
        "streams": streams,
        "offsale_url": offsale_url,
        "offsale_arn": offsale_arn,
        "sqs": sqs,
        "timer_url": timer_url,
        "functions": functions,
    }


def function_env(moto, operator_base, res):
    """--env-vars: one set for every function. `sam local` passes a
    function only the variables its template declares, each taking its
    value from here."""
    return {
        "Parameters": {
            "AWS_ENDPOINT_URL": moto,
            "REQUESTS_TABLE_PREFIX": PREFIX,
            "BREAKER_TABLE": NAMES["breaker"],
            "CACHE_TABLE": NAMES["cache"],
            "CARTS_TABLE": NAMES["carts"],
            "ORDERS_TABLE": NAMES["orders"],
            "SALE_STATUS_TABLE": NAMES["sale_status"],
            "EVENT_BUS_NAME": NAMES["bus"],
            "OPERATOR_SETTINGS": "",
            "OPERATOR_ENDPOINTS": ",".join(f"{op}={operator_base}/{op}" for op in OPERATORS),
            "OPERATOR_CREDENTIALS_PATH": "",
            # The endpoints and settings above, not an operator config table's.
            "OPERATOR_CONFIG_TABLE": "",
            "OPERATOR_CONFIG_REVISION": "sam-local",
            "OPERATORS": ",".join(OPERATORS),
            "ALARM_OPERATORS": f"{ALARM}=nordic",
            "REAL_CONSUMER_FUNCTION": res["functions"]["real-consumer"],
            "FALLBACK_CONSUMER_FUNCTION": res["functions"]["fallback-consumer"],
            "BREAKER_TIMER_QUEUE_URL": res["timer_url"],
            "OFFSALE_QUEUE_URL": res["offsale_url"],
            "CALL_CONCURRENCY": "50",
            "CALL_LOG_SHARE": "0.01",
            "CART_SETTINGS": "",
            "BREAKER_CACHE_MS": "1000",
            "SALE_STATUS_STORE": "dynamodb",
            "SALE_SWITCH": "table",
            "SALE_SWITCH_URL": "",
            "SALE_SWITCH_METHOD": "PUT",
            "SALE_SWITCH_AUTH_HEADER": "",
            "SALE_SWITCH_AUTH_VALUE": "",
            "SALE_SWITCH_AUTH_PARAMETER": "",
            "SALE_RETRY_MAX_ATTEMPTS": "8",
            "SALE_SWITCH_TIMEOUT_MS": "2000",
            "SALE_ON_SALE_AT": "closed",
            # no holds: each change is written at once, within one invoke
            "SALE_ON_SALE_HOLD_S": "0",
            "SALE_OFF_SALE_HOLD_S": "0",
            "SELF_FAULT_SHARE": "0.5",
            "ORDER_SETTINGS": "",
            # a run long enough to start a booking and look once for its
            # answer, not the deployed 50 s that nothing answers here
            "BOOKING_RUN_MS": "2000",
        }
    }


# What `sam local` adds to every function's Timeout: it counts the start of
# the function's container (podman starting it, SAM's emulator booting in it)
# against the function's own timeout, where Lambda bounds a start apart from
# the invocation. On a busy machine, two requests at a time, a start took
# longer than the cart's 8 s, and SAM answered 502 for a cart that would
# have answered in 60 ms. Each function still stops its own calls within
# their budgets, and schemathesis waits at most 60 s for an answer.
CONTAINER_START_ALLOWANCE_S = 30


def local_template(build_dir):
    """The built template with AWS_ENDPOINT_URL declared in Globals, beside
    it (CodeUri is relative to the template): `sam local` sets only declared
    variables, and the deployed template must not carry an endpoint. Every
    function's Timeout is raised by CONTAINER_START_ALLOWANCE_S."""
    from samcli.yamlhelper import yaml_dump, yaml_parse

    built = build_dir / "template.yaml"
    check(built.is_file(), f"{built} is missing: the host build did not run")
    template = yaml_parse(built.read_text())
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    variables["AWS_ENDPOINT_URL"] = ""
    default_timeout = int(template["Globals"]["Function"]["Timeout"])
    for resource in template["Resources"].values():
        # (a Fn::ForEach entry is a list: the lanes, no function)
        if isinstance(resource, dict) and resource.get("Type") == "AWS::Serverless::Function":
            properties = resource.setdefault("Properties", {})
            timeout = int(properties.get("Timeout", default_timeout))
            properties["Timeout"] = timeout + CONTAINER_START_ALLOWANCE_S
    out = build_dir / "sam-local-template.yaml"
    out.write_text(yaml_dump(template))
    return out


# ---------------------------------------------------------------- events


def fixture(name):
    return json.loads((EVENTS / name).read_text())


def iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def fresh_requests(event, ddb):
    """The fixture's request records with created_at now and a deadline a
    minute on (its own dates are past, and an expired request is answered
    without calling the operator); each well-formed request of a served
    operator is stored in its operator's Requests table as search writes it
    (the others never were). Returns the event and the stored keys."""
    event = copy.deepcopy(event)
    now = datetime.now(timezone.utc)
    stored = []
    for record in event["Records"]:
        image = record.get("dynamodb", {}).get("NewImage")
        if not image or "created_at" not in image:
            continue
        image["created_at"] = {"S": iso(now)}
        image["deadline"] = {"S": iso(now + timedelta(seconds=60))}
        image["expires_at"] = {"N": str(int(now.timestamp()) + 86400)}
        operator = image.get("operator", {}).get("S", "")
        if (
            record["eventName"] == "INSERT"
            and operator in OPERATORS
            and image.get("record_type", {}).get("S") == "request"
            and "operation" in image
        ):
            ddb.put_item(TableName=PREFIX + operator, Item=image)
            stored.append((operator, image["request_id"]["S"]))
    return event, stored


def stream_event(items, operator, streams):
    """A Lambda DynamoDB stream event of INSERTs of `items`, in the
    fixture's record shape."""
    base = fixture("dynamodb-insert-requests.json")["Records"][0]
    records = []
    for i, item in enumerate(items):
        record = copy.deepcopy(base)
        record["eventID"] = f"{i:032x}"
        record["dynamodb"]["Keys"] = {"request_id": item["request_id"]}
        record["dynamodb"]["NewImage"] = item
        record["dynamodb"]["SequenceNumber"] = str(900000000000000000000 + i)
        record["eventSourceARN"] = streams[operator]
        records.append(record)
    return {"Records": records}


def http_event(method, path, query="", body=None):
    """An API Gateway HTTP API (payload 2.0) request, in the shape of
    http-api-get-sailings.json."""
    event = fixture("http-api-get-sailings.json")
    event["routeKey"] = f"{method} {path}"
    event["rawPath"] = path
    event["rawQueryString"] = query
    event["queryStringParameters"] = dict(urllib.parse.parse_qsl(query)) or None
    if event["queryStringParameters"] is None:
        del event["queryStringParameters"]
    event["requestContext"]["http"]["method"] = method
    event["requestContext"]["http"]["path"] = path
    event["requestContext"]["routeKey"] = f"{method} {path}"
    if body is not None:
        event["body"] = json.dumps(body)
        event["headers"]["content-type"] = "application/json"
        event["headers"]["content-length"] = str(len(event["body"]))
    return event


# ---------------------------------------------------------------- invoke


class Invoker:
    def __init__(self, template, env_file, state, arch, host_address):
        self.template = template
        self.arch = arch
        self.host_address = host_address
        self.env_file = env_file
        self.state = state
        self.rows = []
        self.failures = 0

    def invoke(self, function, label, event):
        """`sam local invoke` with `event`; returns the function's answer
        (parsed JSON) and its log."""
        path = self.state / "events" / f"{file_name(function, label)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(event, indent=1))
        started = time.monotonic()
        run = subprocess.run(
            [
                "sam",
                "local",
                "invoke",
                function,
                "--template",
                str(self.template),
                "--event",
                str(path),
                "--env-vars",
                str(self.env_file),
                "--add-host",
                f"localhost:{self.host_address}",
                "--skip-pull-image",
                "--language-extensions",
                "--parameter-overrides",
                f"Architecture={self.arch}",
                "--region",
                REGION,
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        seconds = time.monotonic() - started
        log = self.state / "logs" / f"{file_name(function, label)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(
            f"$ sam local invoke {function} ({label})\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
        )
        answer = None
        for line in reversed(run.stdout.strip().splitlines()):
            try:
                answer = json.loads(line)
                break
            except ValueError:
                continue
        return answer, run, seconds, log

    def step(self, function, label, event, expect):
        """Invoke, then `expect(answer)` checks the answer and what the
        function wrote; a Failed or an error answer fails the step."""
        answer, run, seconds, log = self.invoke(function, label, event)
        try:
            check(run.returncode == 0, f"sam local invoke exited {run.returncode}")
            if answer is None:
                # An init failure (the function exited before answering)
                # prints no answer: name its error from the log.
                lines = [line.strip() for line in run.stderr.splitlines() if line.strip()]
                errors = [
                    line
                    for line in lines
                    if line.startswith("Error:") or "[ERROR]" in line or "panicked" in line
                ]
                raise Failed(
                    "no answer: " + " / ".join(errors[:2] or lines[-2:] or ["nothing printed"])
                )
            check(
                not (isinstance(answer, dict) and "errorType" in answer),
                f"function error {answer.get('errorType') if isinstance(answer, dict) else ''}: "
                f"{answer.get('errorMessage') if isinstance(answer, dict) else ''}",
            )
            detail = expect(answer) or "ok"
            result = f"ok: {detail}"
        except Failed as e:
            self.failures += 1
            result = f"FAILED: {e} (log: {shown(log)})"
        self.rows.append((function, label, result, seconds))
        print(f"{function:<26} {label:<34} {seconds:5.1f} s  {result}", flush=True)
        return answer


def batch_failures(answer):
    check(
        isinstance(answer, dict) and "batchItemFailures" in answer,
        f"no batchItemFailures in {answer}",
    )
    return answer["batchItemFailures"]


def http_answer(answer, status):
    check(isinstance(answer, dict) and "statusCode" in answer, f"not an HTTP answer: {answer}")
    check(
        answer["statusCode"] == status,
        f"HTTP {answer['statusCode']}, expected {status}: {answer.get('body')}",
    )
    try:
        return json.loads(answer.get("body") or "null")
    except ValueError:
        raise Failed(f"body is not JSON: {answer.get('body')!r}") from None


def run_all(inv, res):
    ddb = res["ddb"]
    lam = res["lambda"]

    def outcomes(stored, status, by):
        """Every stored request has an outcome of `status` written by `by`."""
        for op, rid in stored:
            item = ddb.get_item(TableName=PREFIX + op, Key={"request_id": {"S": rid}}).get(
                "Item", {}
            )
            check("outcome" in item, f"no outcome written on {rid}")
            outcome = item["outcome"]["M"]
            got = (outcome.get("status", {}).get("S"), outcome.get("by", {}).get("S"))
            check(got == (status, by), f"{rid}: outcome {got}, expected {(status, by)}: {outcome}")

    def outcome_of(op, rid):
        return ddb.get_item(TableName=PREFIX + op, Key={"request_id": {"S": rid}})["Item"][
            "outcome"
        ]

    # The consumers, each on freshly stored requests (an outcome already
    # written would be left alone).
    written_by = {
        "RealConsumerFunction": ("answered", "real-consumer"),
        "FallbackConsumerFunction": ("failed", "fallback-consumer"),
    }
    for function in ("RealConsumerFunction", "FallbackConsumerFunction"):
        calls_before = len(Operator.calls)
        event, stored = fresh_requests(fixture("dynamodb-insert-requests.json"), ddb)

        def inserts(answer, stored=stored, function=function, calls_before=calls_before):
            check(batch_failures(answer) == [], f"batchItemFailures {answer['batchItemFailures']}")
            check(len(stored) == 3, f"{len(stored)} requests stored, expected 3")
            outcomes(stored, *written_by[function])
            calls = len(Operator.calls) - calls_before
            if function == "RealConsumerFunction":
                check(calls == 3, f"{calls} operator calls, expected 3 (two searches, one price)")
                return f"3 answered, {calls} operator calls"
            check(calls == 0, f"the fallback consumer called the operator {calls} times")
            return "3 failed fast, no operator call"

        inv.step(function, "dynamodb-insert-requests", event, inserts)

        event, stored = fresh_requests(fixture("dynamodb-foreign-and-malformed.json"), ddb)

        def malformed(answer, stored=stored, function=function):
            # One bad record fails that record (quarantined, an Operator
            # Request Failed event), never the batch; the one good request
            # gets its outcome.
            check(batch_failures(answer) == [], f"batchItemFailures {answer['batchItemFailures']}")
            check(len(stored) == 1, f"{len(stored)} requests stored, expected the one good request")
            outcomes(stored, *written_by[function])
            return f"no batch item failures, the good request {written_by[function][0]}"

        inv.step(function, "dynamodb-foreign-and-malformed", event, malformed)

    # Search: nothing cached for this question yet, so it writes a request
    # and waits its budget (3 s) for an outcome that nothing delivers here
    # (no stream poller runs under `sam local`): 503, reason timeout ...
    search_event = fixture("http-api-get-sailings.json")
    question = search_event["queryStringParameters"]
    written = {}

    def first_search(answer):
        body = http_answer(answer, 503)
        check(
            body.get("reason") == "timeout",
            f"reason {body.get('reason')!r}, expected 'timeout': {body}",
        )
        items = ddb.scan(TableName=PREFIX + "nordic")["Items"]
        mine = [
            i
            for i in items
            if i.get("operation", {}).get("S") == "search"
            and i.get("params", {}).get("M", {}).get("date", {}).get("S") == question["date"]
        ]
        check(mine, "search wrote no request to lifeboat.requests.nordic")
        written["item"] = mine[-1]
        return f"HTTP 503 (timeout), request {mine[-1]['request_id']['S'][:8]} written"

    inv.step("SearchFunction", "http-api-get-sailings", search_event, first_search)

    # ... the real consumer answers that request as the stream would hand it
    # over, which fills the cache ...
    if "item" in written:
        calls_before = len(Operator.calls)
        rid = written["item"]["request_id"]["S"]
        # As the stream would deliver it while search waits: as search
        # wrote it (without the "expired" outcome search wrote when its
        # budget ran out), created now and its deadline ahead.
        item = written["item"]
        item.pop("outcome", None)
        now = datetime.now(timezone.utc)
        item["created_at"] = {"S": iso(now)}
        item["deadline"] = {"S": iso(now + timedelta(seconds=60))}
        ddb.put_item(TableName=PREFIX + "nordic", Item=item)

        def answered(answer):
            check(batch_failures(answer) == [], f"batchItemFailures {answer['batchItemFailures']}")
            check(len(Operator.calls) - calls_before == 1, "the operator was not called")
            outcome = outcome_of("nordic", rid)
            check("sailings" in json.dumps(outcome), f"the outcome holds no sailings: {outcome}")
            return "answered, cache filled"

        inv.step(
            "RealConsumerFunction",
            "the search's request",
            stream_event([written["item"]], "nordic", res["streams"]),
            answered,
        )

        # ... and the same search is answered from the cache.
        def cached_search(answer):
            body = http_answer(answer, 200)
            text = json.dumps(body)
            check(
                "NRD-HEL-TLL-20261224-0730" in text,
                f"the operator's sailings are not in the answer: {text[:300]}",
            )
            return "HTTP 200 with the operator's sailings"

        inv.step("SearchFunction", "http-api-get-sailings (cached)", search_event, cached_search)

    # Cart: open a cart for the sailing search showed.
    sailing = "NRD-HEL-TLL-20261224-0730"
    cart = {}

    def opened(answer):
        body = http_answer(answer, 201)
        cart_id = body.get("cart_id") or body.get("cart", {}).get("cart_id")
        check(cart_id, f"no cart_id in {json.dumps(body)[:300]}")
        item = ddb.get_item(TableName=NAMES["carts"], Key={"cart_id": {"S": cart_id}}).get("Item")
        check(item, f"cart {cart_id} is not in {NAMES['carts']}")
        cart["id"] = cart_id
        return f"HTTP 201, cart {cart_id[:8]} stored"

    inv.step(
        "CartFunction",
        "POST /carts",
        http_event(
            "POST",
            "/carts",
            body={
                "operator": "nordic",
                "sailing_id": sailing,
                "from": "HEL",
                "to": "TLL",
                "date": question["date"],
                "passengers": 2,
            },
        ),
        opened,
    )
    if "id" in cart:

        def got(answer):
            body = http_answer(answer, 200)
            check(cart["id"] in json.dumps(body), "another cart came back")
            return "HTTP 200, the stored cart"

        inv.step(
            "CartFunction", "GET /carts/{cart_id}", http_event("GET", f"/carts/{cart['id']}"), got
        )

    # The circuit switch, through the events that wake it, in an order that
    # moves nordic's breaker: the alarm opens it (and re-points nordic's
    # lane to the fallback consumer), the duplicate alarm payload and the
    # stale trip and trials change nothing, the operator's command pins it.
    def breaker(op="nordic"):
        item = ddb.get_item(
            TableName=NAMES["breaker"], Key={"operator": {"S": op}, "item": {"S": "breaker"}}
        ).get("Item")
        return item

    def lane_target(op="nordic"):
        for m in lam.list_event_source_mappings(EventSourceArn=res["streams"][op])[
            "EventSourceMappings"
        ]:
            return m["FunctionArn"]

    def decisions(answer, expected):
        """The switch's report: one decision per operator named in
        `expected` (operator: (from, to, changed, reason or None))."""
        check(isinstance(answer, dict) and "decisions" in answer, f"no decisions in {answer}")
        got = {d["operator"]: d for d in answer["decisions"]}
        for op, (frm, to, changed, reason) in expected.items():
            d = got.get(op)
            check(d is not None, f"no decision for {op}: {answer['decisions']}")
            check(
                (d["from"], d["to"], d["changed"]) == (frm, to, changed)
                and (reason is None or d["reason"] == reason),
                f"{op}: {d['from']} -> {d['to']} changed={d['changed']} ({d['reason']}), "
                f"expected {frm} -> {to} changed={changed}" + (f" ({reason})" if reason else ""),
            )
        check(
            answer.get("batchItemFailures", []) == [],
            f"batchItemFailures {answer.get('batchItemFailures')}",
        )
        return "; ".join(f"{op} {d[0]} -> {d[1]}" for op, d in expected.items())

    inv.step(
        "CircuitSwitchFunction",
        "schedule-tick",
        fixture("schedule-tick.json"),
        lambda a: decisions(
            a,
            {
                "nordic": ("closed", "closed", False, None),
                "baltic": ("closed", "closed", False, None),
            },
        ),
    )

    def alarm_opened(answer):
        decisions(answer, {"nordic": ("closed", "open", True, f"alarm {ALARM} in ALARM")})
        item = breaker()
        check(item, f"no breaker item for nordic in {NAMES['breaker']}")
        state = json.dumps(item)
        check('"open"' in state, f"nordic's breaker is not open: {state[:300]}")
        target = lane_target()
        check(target == res["functions"]["fallback-consumer"], f"nordic's lane points at {target}")
        return "nordic open, lane on the fallback consumer"

    # The switch opens a closed breaker on an ALARM only when the failure
    # window the consumers wrote bears it out (docs/security.md, "Breaker
    # signals"): nordic times out every call of its last ten seconds, as
    # the real consumer would have counted them in the Breaker table.
    now_s = int(time.time())
    for age in range(1, 11):
        ddb.put_item(
            TableName=NAMES["breaker"],
            Item={
                "operator": {"S": "nordic"},
                "item": {"S": f"bucket#{(now_s - age) * 1000:015d}"},
                "calls": {"N": "10"},
                "successes": {"N": "0"},
                "failures": {"N": "0"},
                "timeouts": {"N": "10"},
                "slow": {"N": "0"},
            },
        )

    inv.step(
        "CircuitSwitchFunction",
        "cloudwatch-alarm-state-change",
        fixture("cloudwatch-alarm-state-change.json"),
        alarm_opened,
    )

    # What the switch announced, as BreakerStateChangedRule put it on
    # OffsaleQueue, handed to the off-sale listener as OffsaleQueueMapping
    # would: the listener takes nordic off sale, and later back on.
    def sale_status():
        item = ddb.get_item(TableName=NAMES["sale_status"], Key={"operator": {"S": "nordic"}}).get(
            "Item", {}
        )
        return item.get("applied_status", {}).get("S")

    def announced_changes(label, status):
        messages = []
        deadline = time.monotonic() + 10
        while not messages and time.monotonic() < deadline:
            messages = (
                res["sqs"]
                .receive_message(
                    QueueUrl=res["offsale_url"],
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=1,
                    AttributeNames=["All"],
                )
                .get("Messages", [])
            )
        base = fixture("sqs-breaker-state-changed.json")["Records"][0]
        records = []
        for m in messages:
            record = copy.deepcopy(base)
            record.update(
                messageId=m["MessageId"],
                receiptHandle=m["ReceiptHandle"],
                body=m["Body"],
                md5OfBody=m["MD5OfBody"],
                eventSourceARN=res["offsale_arn"],
            )
            record["attributes"].update(
                {k: v for k, v in m.get("Attributes", {}).items() if k in record["attributes"]}
            )
            records.append(record)

        def applied(answer):
            check(records, "no Breaker State Changed reached lifeboat-offsale from the bus")
            check(batch_failures(answer) == [], f"batchItemFailures {answer['batchItemFailures']}")
            check(
                sale_status() == status,
                f"nordic's applied_status is {sale_status()!r}, expected {status!r}",
            )
            return f"{len(records)} change from the bus, nordic {status}"

        inv.step("OffsaleListenerFunction", label, {"Records": records}, applied)

    announced_changes("Breaker State Changed (open)", "off_sale")

    # A cart opened and confirmed while nordic is off sale: the default
    # accommodation, the cached fare, and its order held for booking.
    held = {}

    def opened_off_sale(answer):
        body = http_answer(answer, 201)
        check(body.get("off_sale") is True, f"the cart is not off sale: {json.dumps(body)[:300]}")
        held["cart"] = body["cart_id"]
        return f"HTTP 201, degraded ({body.get('degraded', {}).get('reason')})"

    inv.step(
        "CartFunction",
        "POST /carts (off sale)",
        http_event(
            "POST",
            "/carts",
            body={
                "operator": "nordic",
                "sailing_id": sailing,
                "from": "HEL",
                "to": "TLL",
                "date": question["date"],
                "passengers": 2,
            },
        ),
        opened_off_sale,
    )

    def order_item():
        return ddb.get_item(
            TableName=NAMES["orders"], Key={"pk": {"S": held.get("order", "")}}
        ).get("Item", {})

    if "cart" in held:

        def confirmed_held(answer):
            body = http_answer(answer, 200)
            booking = body.get("booking") or {}
            check(
                body.get("status") == "confirmed" and booking.get("status") in ("held", "on_request"),
                f"not confirmed with a held order: {json.dumps(body)[:400]}",
            )
            held["order"] = booking["order_id"]
            check(order_item(), f"order {held['order']} is not in {NAMES['orders']}")
            return f"HTTP 200, order {held['order'][:11]} {booking['status']}"

        inv.step(
            "CartFunction",
            "POST /carts/{cart_id}/confirm (off sale)",
            http_event("POST", f"/carts/{held['cart']}/confirm"),
            confirmed_held,
        )

    for name, reason in (
        ("cloudwatch-alarm-lambda-action", "alarm only opens a closed breaker"),
        ("trip-requested", "trip request for an older version"),
        ("trials-passed", "not half-open"),
    ):
        inv.step(
            "CircuitSwitchFunction",
            name,
            fixture(f"{name}.json"),
            lambda a, reason=reason: decisions(a, {"nordic": ("open", "open", False, reason)}),
        )

    # nordic's timer: the switch probes the open breaker with the last
    # search nordic answered (the one above), the stub answers, and two
    # trials later the breaker is closed and the lane back on the real
    # consumer.
    def timer(answer):
        got = [(d["operator"], d["from"], d["to"]) for d in answer.get("decisions", [])]
        expected = [("nordic", "open", "half_open"), ("nordic", "half_open", "closed")]
        check(got == expected, f"decisions {got}, expected {expected}")
        check(answer.get("probe_calls", 0) >= 1, "no probe call")
        check(batch_failures(answer) == [], f"batchItemFailures {answer['batchItemFailures']}")
        target = lane_target()
        check(target == res["functions"]["real-consumer"], f"nordic's lane points at {target}")
        return f"probed ({answer['probe_calls']} calls), nordic closed, lane on the real consumer"

    inv.step("CircuitSwitchFunction", "sqs-breaker-timer", fixture("sqs-breaker-timer.json"), timer)
    announced_changes("Breaker State Changed (closed)", "on_sale")

    # nordic is back: the booking worker books the held order through the
    # gateway, a book request the real consumer answers (the stub books it
    # once per idempotency key), and its next run reads the answer.
    if "order" in held:

        def order_state():
            # the order's state, a map tagged by its "state"
            return order_item().get("state", {}).get("M", {}).get("state", {}).get("S")

        def worker_report(answer):
            check(
                isinstance(answer, dict) and "operators" in answer,
                f"no operators in the report: {answer}",
            )
            report = {o["operator"]: o for o in answer["operators"]}
            nordic = report.get("nordic")
            check(nordic is not None, f"no report for nordic: {answer}")
            check(not nordic.get("errors"), f"nordic's run failed: {nordic['errors']}")
            return nordic

        def booking_started(answer):
            nordic = worker_report(answer)
            check(nordic.get("started") == 1, f"{nordic.get('started')} booking calls started")
            books = [
                i
                for i in ddb.scan(TableName=PREFIX + "nordic")["Items"]
                if i.get("operation", {}).get("S") == "book"
            ]
            check(len(books) == 1, f"{len(books)} book requests in lifeboat.requests.nordic")
            held["request"] = books[0]
            check(order_state() == "booking", f"the order is {order_state()!r}, not booking")
            return "1 book request written, the order booking"

        inv.step("BookingWorkerFunction", "schedule-tick", fixture("schedule-tick.json"), booking_started)

    if "request" in held:
        calls_before = len(Operator.calls)

        def book_answered(answer):
            check(batch_failures(answer) == [], f"batchItemFailures {answer['batchItemFailures']}")
            posts = [c for c in Operator.calls[calls_before:] if c[0][-1] == "book"]
            check(len(posts) == 1, f"{len(posts)} book calls to the operator")
            check(len(Operator.bookings) == 1, f"{len(Operator.bookings)} bookings taken")
            outcome = outcome_of("nordic", held["request"]["request_id"]["S"])
            check("booked" in json.dumps(outcome), f"the outcome is not a booking: {outcome}")
            return "the operator booked it once"

        inv.step(
            "RealConsumerFunction",
            "the book request",
            stream_event([held["request"]], "nordic", res["streams"]),
            book_answered,
        )

        def booked(answer):
            worker_report(answer)
            check(order_state() == "booked", f"the order is {order_state()!r}, not booked")
            return "the order booked"

        inv.step("BookingWorkerFunction", "schedule-tick (answered)", fixture("schedule-tick.json"), booked)

    def forced(answer):
        decisions(answer, {"nordic": ("closed", "forced_open", True, None)})
        state = json.dumps(breaker())
        check("forced_open" in state, f"nordic's breaker is not forced open: {state[:300]}")
        return "nordic forced open"

    inv.step("CircuitSwitchFunction", "operator-command", fixture("operator-command.json"), forced)

    # The stack's capacity check (CapacityCheck), answered at the presigned
    # URL: three lanes at parallelization 4 on 10 reserved fail it.
    check_event = fixture("cloudformation-capacity-check.json")
    check_event["ResponseURL"] = f"{inv.operator_base}/cloudformation-response"

    def capacity(answer):
        check(not answer.get("decisions"), f"decisions for a capacity check: {answer.get('decisions')}")
        put = [body for path, body in Operator.responses if path.endswith("/cloudformation-response")]
        check(len(put) == 1, f"{len(put)} answers PUT to the response URL")
        status, reason = put[0].get("Status"), put[0].get("Reason") or ""
        check(status == "FAILED", f"capacity check answered {status}")
        check("at least 12" in reason, f"capacity check's reason: {reason!r}")
        check(put[0].get("PhysicalResourceId") == "lifeboat-capacity-check", f"answer {put[0]}")
        return "capacity check FAILED at the response URL: at least 12 asked"

    inv.step("CircuitSwitchFunction", "cloudformation-capacity-check", check_event, capacity)

    before = sale_status()

    def listener(answer):
        # Versions 7 and 8 of nordic's breaker, which the Breaker table has
        # never seen: not believed, dropped and acknowledged (no retry), and
        # the sale status stays as it was.
        check(batch_failures(answer) == [], f"batchItemFailures {answer['batchItemFailures']}")
        check(
            sale_status() == before,
            f"nordic's applied_status moved from {before!r} to {sale_status()!r}",
        )
        return "changes the Breaker table never made dropped"

    inv.step(
        "OffsaleListenerFunction",
        "sqs-breaker-state-changed",
        fixture("sqs-breaker-state-changed.json"),
        listener,
    )


def start_api(inv, question):
    """`sam local start-api` on a free loopback port: one search and one cart
    opened and read back over HTTP, as a customer's client would."""
    port = free_port()
    log = inv.state / "logs" / "start-api.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(log, "w") as out:
        api = subprocess.Popen(
            [
                "sam",
                "local",
                "start-api",
                "--template",
                str(inv.template),
                "--env-vars",
                str(inv.env_file),
                "--add-host",
                f"localhost:{inv.host_address}",
                "--skip-pull-image",
                "--language-extensions",
                "--parameter-overrides",
                f"Architecture={inv.arch}",
                "--region",
                REGION,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    check(api.poll() is None, f"sam local start-api ended (log: {shown(log)})")
                    check(
                        time.monotonic() - started < 120,
                        "sam local start-api did not listen in 120 s",
                    )
                    time.sleep(0.5)
            up = time.monotonic() - started

            def call(method, path, body=None):
                data = json.dumps(body).encode() if body is not None else None
                request = urllib.request.Request(base + path, data=data, method=method)
                if data:
                    request.add_header("content-type", "application/json")
                t = time.monotonic()
                try:
                    with urllib.request.urlopen(request, timeout=120) as r:
                        status, text = r.status, r.read().decode()
                except urllib.error.HTTPError as e:
                    status, text = e.code, e.read().decode()
                return status, text, time.monotonic() - t

            rows = []
            query = urllib.parse.urlencode(question)
            status, text, seconds = call("GET", f"/sailings?{query}")
            ok = status == 200 and "NRD-HEL-TLL-20261224-0730" in text
            rows.append(("GET /sailings", ok, f"HTTP {status}", seconds, text))
            status, text, seconds = call(
                "POST",
                "/carts",
                {
                    "operator": "nordic",
                    "sailing_id": "NRD-HEL-TLL-20261224-0730",
                    "from": "HEL",
                    "to": "TLL",
                    "date": question["date"],
                    "passengers": 2,
                },
            )
            cart_id = None
            if status == 201:
                try:
                    body = json.loads(text)
                    cart_id = body.get("cart_id") or body.get("cart", {}).get("cart_id")
                except ValueError:
                    pass
            rows.append(("POST /carts", bool(cart_id), f"HTTP {status}", seconds, text))
            if cart_id:
                status, text, seconds = call(
                    "PUT", f"/carts/{cart_id}/accommodation", {"code": "cabin"}
                )
                ok = status == 200 and cart_id in text and "cabin" in text
                rows.append(("PUT /carts/{id}/accommodation", ok, f"HTTP {status}", seconds, text))
            if inv.contract_examples:
                rows.append(schemathesis(inv, base, log))
        finally:
            api.terminate()
            try:
                api.wait(15)
            except subprocess.TimeoutExpired:
                api.kill()
                api.wait()
    inv.api_up_s = up
    print(f"{'start-api':<26} {'listening':<34} {up:5.1f} s  ok: {base}")
    for label, ok, status, seconds, text in rows:
        if ok:
            result = f"ok: {status}"
        else:
            inv.failures += 1
            result = f"FAILED: {status}: {text[:200]} (log: {shown(log)})"
        inv.rows.append(("start-api", label, result, seconds))
        print(f"{'start-api':<26} {label:<34} {seconds:5.1f} s  {result}", flush=True)


# What schemathesis holds every answer to (docs/api.json): no 5xx but a
# documented 503, every status, content type, required header and body as
# documented, and invalid input refused with a 4xx. Not
# `positive_data_acceptance`: a request the schema allows may still name an
# operator this deployment does not sell, a 400 by design.
CONTRACT_CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
    ]
)


# A 503 is lifeboat's documented "unavailable right now" (with Retry-After),
# not a server error.
CONTRACT_CONFIG = """\
[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "503"]
"""


def schemathesis(inv, base, api_log):
    """schemathesis against the running API with docs/api.json: a row."""
    report = inv.state / "logs" / "schemathesis"
    log = inv.state / "logs" / "schemathesis.log"
    config = inv.state / "schemathesis.toml"
    config.write_text(CONTRACT_CONFIG)
    started = time.monotonic()
    with open(log, "w") as out:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "schemathesis"),
                "--config-file",
                str(config),
                "run",
                # SAM's emulator answers 502 to a body that is not UTF-8
                # without calling the function.
                "--generation-codec",
                "utf-8",
                str(ROOT / "docs" / "api.json"),
                "--url",
                base,
                "--checks",
                CONTRACT_CHECKS,
                "--max-examples",
                str(inv.contract_examples),
                "--seed",
                "1",
                # One request at a time: with two, schemathesis's threads
                # build Python code side by side, and this machine's
                # CPython 3.11 sometimes fails that ("AST constructor
                # recursion depth mismatch"), leaving an operation
                # untested.
                "--workers",
                "1",
                "--generation-database",
                "none",
                "--request-timeout",
                "60",
                "--no-color",
                "--report",
                "junit",
                "--report-dir",
                str(report),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=inv.state,
            check=False,
        )
    text = log.read_text()
    summary = next((l for l in reversed(text.splitlines()) if l.strip()), "").strip("= ")
    ok = done.returncode == 0
    if not ok:
        ok, summary = emulator_only(report, api_log, summary)
    return (
        f"schemathesis ({inv.contract_examples} a route)",
        ok,
        summary,
        time.monotonic() - started,
        f"{summary} (log: {shown(log)})",
    )


def emulator_only(report, api_log, summary):
    """Whether every failure schemathesis reported is SAM's emulator
    answering 502 to a body that is not UTF-8 (it logs a UnicodeDecodeError
    and never calls the function; API Gateway hands such a body to the
    function base64-encoded), with the summary to show. Any other failure,
    or a 502 SAM did not log so, is lifeboat's; an error of schemathesis's
    own (an operation it could not test) fails the run too."""
    cases = []
    errors = 0
    for junit in report.glob("*.xml"):
        tree = ET.parse(junit)
        for failure in tree.iter("failure"):
            cases += [c for c in re.split(r"\n(?=\d+\. Test Case ID:)", failure.text or "") if c.strip()]
        # schemathesis's own errors: an operation it could not test
        errors += sum(1 for _ in tree.iter("error"))
    if not cases or errors:
        return False, summary
    # A case with a body SAM answered 502 with its own message. How the
    # reproduction shows the body varies (`-d $'…'` with escapes, or `-d
    # '…'` when the bytes print, as in a stateful chain); SAM's log below
    # says whether every 502 it answered was a body it could not decode.
    emulator = [
        c
        for c in cases
        if "[502] Bad Gateway" in c and '{"message":"Internal server error"}' in c and " -d " in c
    ]
    log = api_log.read_text(errors="replace")
    refused = log.count("UnicodeDecodeError while processing HTTP request")
    answered_502 = len(re.findall(r'" 502 -', log))
    if len(emulator) == len(cases) and refused >= len(emulator) and answered_502 == refused:
        return True, (
            f"{summary}: each a body that is not UTF-8, which SAM's emulator answered 502 "
            f"without calling the function ({refused} in its log); nothing else"
        )
    return False, summary


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    # Stopped by tools/sam-local's trap: unwind, so the `sam local` child
    # (invoke or start-api) is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--moto", required=True)
    parser.add_argument(
        "--host-address", required=True, help="this machine's address on podman's network"
    )
    parser.add_argument("--build-dir", required=True, type=Path)
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument(
        "--arch", required=True, choices=["arm64", "x86_64"], help="the template's Architecture"
    )
    parser.add_argument(
        "--api", action="store_true", help="also sam local start-api: one search and one cart step"
    )
    parser.add_argument(
        "--contract-examples",
        type=int,
        default=0,
        help="with --api, schemathesis with docs/api.json, this many cases a route (0: none)",
    )
    args = parser.parse_args()
    state = args.state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    # This run's payloads and outputs only.
    for old in ("events", "logs"):
        shutil.rmtree(state / old, ignore_errors=True)

    operator = serve_operator(args.host_address)
    # The functions call operators over http only on loopback: in their
    # containers `localhost` also names this machine (--add-host), and with
    # nothing listening on the container's own loopback their HTTP client
    # goes on to that address, where the stub listens.
    operator_base = f"http://localhost:{operator.server_address[1]}"
    res = provision(args.moto)
    env_file = state / "env.json"
    env_file.write_text(json.dumps(function_env(args.moto, operator_base, res), indent=1))
    template = local_template(args.build_dir.resolve())
    inv = Invoker(template, env_file, state, args.arch, args.host_address)
    inv.contract_examples = args.contract_examples if args.api else 0
    # Where the functions reach the stub: the capacity check's response URL.
    inv.operator_base = operator_base
    print(f"{'function':<26} {'event':<34} {'time':>7}  result", flush=True)
    try:
        run_all(inv, res)
        if args.api:
            start_api(inv, fixture("http-api-get-sailings.json")["queryStringParameters"])
    except Failed as e:
        inv.failures += 1
        print(f"FAILED: {e}")
    total = sum(r[3] for r in inv.rows)
    print(f"{len(inv.rows)} invocations, {inv.failures} failed, {total:.0f} s")
    # What tools/sam-local --write-doc makes docs/local.md's timings of.
    (state / "timings.json").write_text(
        json.dumps(
            {
                "rows": [{"function": r[0], "label": r[1], "seconds": round(r[3], 2)} for r in inv.rows],
                "api_up_s": getattr(inv, "api_up_s", None),
                "contract_examples": inv.contract_examples,
                "failures": inv.failures,
            },
            indent=1,
        )
    )
    return 1 if inv.failures else 0


if __name__ == "__main__":
    sys.exit(main())
