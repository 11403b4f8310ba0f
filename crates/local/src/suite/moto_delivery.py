# moto 5.2.x without its own delivery to Lambda functions. Run inside
# moto_server's Python before the server starts
# (crates/local/src/suite/launcher.rs, MOTO_DELIVERY). moto would invoke a
# mapped or targeted function itself, in Docker; there is no Docker here, and
# the functions run under cargo lambda watch, where lifeboat-local's pumps
# deliver to them as Lambda would. Every change says what moto does and what
# the change does.

# 1. DynamoDB tables forget the event source mappings on their streams.
#    moto registers a mapping created on a table's stream with the table,
#    and on every write it invokes the mapped function in Docker with every
#    stream record not yet handed over. Without Docker that invocation
#    "returns" its error message, which moto takes for success: it empties
#    the stream after every write (the next record even reuses the sequence
#    number), so nothing else can read it, and every write pays for a failed
#    Docker call. The mapping itself (Get / Update / List through the Lambda
#    API) is untouched; delivering the stream is the StreamPump's job.
from moto.dynamodb.models.table import Table

Table.lambda_event_source_mappings = property(lambda self: {}, lambda self, value: None)

# 2. SQS queues forget the event source mappings on them, for the same
#    reason: on every SendMessage moto receives a batch for the mapped
#    function, invokes it in Docker, takes the error text for success and
#    deletes the messages. Delivering the queue (the template's
#    BreakerTimerQueueMapping and OffsaleQueueMapping) is the QueuePump's
#    job.
from moto.sqs.models import Queue

Queue.lambda_event_source_mappings = property(lambda self: {}, lambda self, value: None)

# 3. A rule's Lambda target. moto refuses PutEvents as a whole (HTTP 500,
#    NotImplementedError) when a matching rule targets a Lambda function, so
#    the template's TripRequestedRule would make every Trip Requested fail
#    to publish. The patch: an event for the function NAME (an ARN of the
#    function, or of a version or alias of it) goes to the SQS queue
#    `lifeboat-target-NAME` when lifeboat-local made one, where its BusDrain
#    invokes the function with it, as EventBridge would; without that queue
#    the event is dropped (EventBridge's delivery to a function that cannot
#    take it fails after the rule's retries, and PutEvents succeeds either
#    way). A scheduled rule sends nothing (moto would match every event to
#    it: it has no pattern). Input and InputTransformer are not applied: no
#    Lambda target of the template has one. Every other target is moto's.
import copy

from moto.events.models import Rule
from moto.sqs import sqs_backends
from moto.utilities.arns import parse_arn

LAMBDA_TARGET_QUEUE_PREFIX = "lifeboat-target-"

_send_to_targets = Rule.send_to_targets


def _send_to_targets_with_lambdas(self, original_event, transform_input=True):
    targets = self.targets
    lambdas = [t for t in targets if parse_arn(t["Arn"]).service == "lambda"]
    if not lambdas:
        return _send_to_targets(self, original_event, transform_input)
    others = copy.copy(self)
    others.targets = [t for t in targets if t not in lambdas]
    _send_to_targets(others, original_event, transform_input)
    # A scheduled rule has no pattern, which moto takes for "every event";
    # EventBridge sends it only its schedule's ticks (played by the harness).
    if self.scheduled_expression or not self.event_pattern.matches_event(original_event):
        return
    backend = sqs_backends[self.account_id][self.region_name]
    for target in lambdas:
        name = target["Arn"].split(":function:")[-1].split(":")[0]
        queue = LAMBDA_TARGET_QUEUE_PREFIX + name
        if queue not in backend.queues:
            continue
        self._send_to_sqs_queue(queue, dict(original_event))


Rule.send_to_targets = _send_to_targets_with_lambdas

# 4. Names CloudFormation makes up (`<stack>-<LogicalId>-<SUFFIX>`, for a
#    function, a queue, a table without a name) end in a random suffix in
#    moto, as on AWS. lifeboat-local gives the functions under a watch that
#    outlives a run the environment the stack gives them, and a second run
#    on the same moto must find the same one: the patch makes the suffix a
#    digest of the stack's and the resource's names, so a stack deployed
#    again under the same name gets the same names.
import hashlib

import moto.cloudformation.parsing as _parsing

_generate_resource_name = _parsing.generate_resource_name


def _stable_resource_name(resource_type, stack_name, logical_id):
    name = _generate_resource_name(resource_type, stack_name, logical_id)
    digest = hashlib.sha256(f"{stack_name}/{logical_id}".encode()).hexdigest()
    suffix = digest[:12].upper()
    head, sep, random_part = name.rpartition("-")
    if not sep or len(random_part) != len(suffix):
        return name
    stable = f"{head}-{suffix}"
    return stable.lower() if name == name.lower() else stable


_parsing.generate_resource_name = _stable_resource_name
