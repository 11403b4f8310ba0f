# moto 5.2.x's CloudFormation, made to create template.yaml as translated by
# crates/local/src/template/translate.py. Run inside moto_server's Python
# before the server starts (crates/local/src/suite/launcher.rs,
# MOTO_CLOUDFORMATION); every change says what moto does wrong and what the
# change does. Nothing here runs a function: they run under cargo lambda
# watch, and the harness's pumps deliver to them.
import json

from moto.cloudformation.utils import random_suffix
from moto.core.common_models import CloudFormationModel

# 1. `!Ref EventBus` (an AWS::Events::EventBus) gives the model object itself
#    instead of the bus's name: moto's EventBus has no physical_resource_id,
#    and CloudFormation's Ref falls back to the object. A rule on the bus then
#    fails in put_rule ("'EventBus' object has no attribute 'split'").
#    The patch: the bus's physical id is its name, as on AWS.
from moto.events.models import EventBus

EventBus.physical_resource_id = property(lambda self: self.name)


# 2. moto's CloudFormation cannot create AWS::CloudWatch::Alarm,
#    AWS::SQS::QueuePolicy, AWS::Lambda::EventInvokeConfig,
#    AWS::ApiGatewayV2::Api or
#    AWS::ApiGatewayV2::Stage: it logs "No Moto CloudFormation support",
#    skips the resource, and then refuses the stack at the first Ref or
#    GetAtt naming one ("Fn::GetAtt references undefined resource").
#    The patch: a model for each that CloudFormation can create, list, Ref and
#    GetAtt as on AWS (name or id, Arn), keeping its properties. Where moto has
#    the thing itself, it is applied too: a queue policy becomes the queues'
#    Policy attribute, an EventInvokeConfig the function's. Alarms and the
#    HTTP API exist only as stack resources: moto's CloudWatch does not
#    evaluate alarms (lifeboat-local's alarm evaluator does), and the API is
#    played by the functions' own HTTP endpoints under cargo lambda watch.
#    (moto does not enforce resource policies either: the event bus's
#    Policy is kept nowhere.)
#    (moto finds CloudFormation's models among the direct subclasses of
#    CloudFormationModel, hence the mixin; and files every model under the
#    service its module names, hence MODULE.)
MODULE = "moto.cloudformation.lifeboat_local"


class StackOnlyResource:
    """A resource moto's CloudFormation keeps without a service behind it."""

    TYPE = ""
    NAME_PROPERTY = ""
    # what GetAtt may ask of it
    ATTRIBUTES = ("Arn",)

    def __init__(self, name, properties, account_id, region):
        self.name = name
        self.properties = properties
        self.account_id = account_id
        self.region = region

    @property
    def physical_resource_id(self):
        return self.name

    @classmethod
    def cloudformation_type(cls):
        return cls.TYPE

    @classmethod
    def cloudformation_name_type(cls):
        return cls.NAME_PROPERTY

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr in cls.attributes()

    @classmethod
    def attributes(cls):
        return list(cls.ATTRIBUTES)

    def get_cfn_attribute(self, attribute_name):
        from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

        if attribute_name == "Arn":
            return self.arn()
        raise UnformattedGetAttTemplateException()

    def arn(self):
        return None

    def apply(self):
        pass

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        resource = cls(resource_name, cloudformation_json.get("Properties", {}), account_id, region_name)
        resource.apply()
        return resource

    @classmethod
    def update_from_cloudformation_json(
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)

    @classmethod
    def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
        pass


class Alarm(StackOnlyResource, CloudFormationModel):
    __module__ = MODULE
    TYPE = "AWS::CloudWatch::Alarm"
    NAME_PROPERTY = "AlarmName"

    def arn(self):
        return f"arn:aws:cloudwatch:{self.region}:{self.account_id}:alarm:{self.name}"


class QueuePolicy(StackOnlyResource, CloudFormationModel):
    __module__ = MODULE
    TYPE = "AWS::SQS::QueuePolicy"

    def apply(self):
        from moto.sqs.models import sqs_backends

        policy = self.properties.get("PolicyDocument", {})
        for url in self.properties.get("Queues", []):
            queue_name = str(url).rstrip("/").rsplit("/", 1)[-1]
            sqs_backends[self.account_id][self.region].set_queue_attributes(
                queue_name, {"Policy": json.dumps(policy)}
            )


class EventInvokeConfig(StackOnlyResource, CloudFormationModel):
    __module__ = MODULE
    TYPE = "AWS::Lambda::EventInvokeConfig"

    def apply(self):
        from moto.awslambda.models import lambda_backends

        config = {k: v for k, v in self.properties.items() if k not in ("FunctionName", "Qualifier")}
        lambda_backends[self.account_id][self.region].put_function_event_invoke_config(
            self.properties["FunctionName"], config
        )


class HttpApi(StackOnlyResource, CloudFormationModel):
    __module__ = MODULE
    TYPE = "AWS::ApiGatewayV2::Api"
    ATTRIBUTES = ("ApiEndpoint", "ApiId")

    def __init__(self, name, properties, account_id, region):
        # An API's id, as API Gateway makes them: ten lowercase characters.
        super().__init__(random_suffix()[:10].lower(), properties, account_id, region)

    def get_cfn_attribute(self, attribute_name):
        if attribute_name == "ApiId":
            return self.name
        if attribute_name == "ApiEndpoint":
            return f"https://{self.name}.execute-api.{self.region}.amazonaws.com"
        return super().get_cfn_attribute(attribute_name)


class HttpApiStage(StackOnlyResource, CloudFormationModel):
    __module__ = MODULE
    TYPE = "AWS::ApiGatewayV2::Stage"
    NAME_PROPERTY = "StageName"
    ATTRIBUTES = ()


# 3. CloudFormation hands a resource a parameter's value as text ("4" for
#    `ParallelizationFactor: !Ref LaneParallelization`); AWS converts it to
#    the number the resource's schema says, moto keeps the text and answers
#    `"ParallelizationFactor": "4"`, which an SDK refuses to read.
#    The patch: the numeric properties of the resource types the template
#    creates with a parameter's value become numbers before the resource is
#    created, as on AWS.
import moto.cloudformation.parsing as cfn_parsing

NUMERIC_PROPERTIES = {
    "AWS::Lambda::EventSourceMapping": [
        ("BatchSize",),
        ("MaximumBatchingWindowInSeconds",),
        ("ParallelizationFactor",),
        ("MaximumRecordAgeInSeconds",),
        ("MaximumRetryAttempts",),
        ("TumblingWindowInSeconds",),
        ("ScalingConfig", "MaximumConcurrency"),
    ],
    "AWS::Lambda::Function": [("MemorySize",), ("Timeout",), ("ReservedConcurrentExecutions",)],
    "AWS::Logs::LogGroup": [("RetentionInDays",)],
}
_parse_resource = cfn_parsing.parse_resource


def parse_resource_with_numbers(resource_json, resources_map):
    parsed = _parse_resource(resource_json, resources_map)
    if parsed:
        _, cleaned, resource_type = parsed
        for path in NUMERIC_PROPERTIES.get(resource_type, []):
            node = cleaned.get("Properties", {})
            for key in path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict) and isinstance(node.get(path[-1]), str):
                node[path[-1]] = int(node[path[-1]])
    return parsed


cfn_parsing.parse_resource = parse_resource_with_numbers


# 4. A custom resource (the template's CapacityCheck, served by the circuit
#    switch) makes moto invoke its function in Docker, in a thread. There is
#    no Docker here: the call fails, is logged, and the resource never
#    answers. The patch: moto creates the custom resource and invokes
#    nothing; the stack stays CREATE_IN_PROGRESS until the request is
#    answered at moto's cfnresponse URL (see crates/local/src/stack.rs).
import moto.cloudformation.custom_model as custom_model


class NoInvocation:
    def __init__(self, target=None, args=()):
        pass

    def start(self):
        pass


class NoThreads:
    Thread = NoInvocation


custom_model.threading = NoThreads


# 5. Gradual deploys (the functions' AutoPublishAlias and
#    DeploymentPreference): SAM makes an AWS::Lambda::Version, an
#    AWS::Lambda::Alias `live` on it, and CodeDeploy's application and a
#    deployment group per function. moto's AWS::Lambda::Version publishes the
#    version, but has no physical id for Ref (the version's ARN on AWS) and
#    no Version attribute for the alias's `!GetAtt …Version`; it has no
#    model for AWS::Lambda::Alias, AWS::CodeDeploy::Application or
#    AWS::CodeDeploy::DeploymentGroup. The patch: a version's Ref and
#    Version as on AWS; an alias made with moto's own CreateAlias, Ref its
#    ARN; the CodeDeploy resources exist only as stack resources (moto shifts
#    no traffic and evaluates no alarm: a deploy here is all at once).
from moto.awslambda.models import LambdaVersion, lambda_backends


def _version_create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    properties = cloudformation_json["Properties"]
    published = lambda_backends[account_id][region_name].publish_version(properties["FunctionName"])
    version = LambdaVersion({"Version": published.version})
    version.arn = published.function_arn
    return version


LambdaVersion.create_from_cloudformation_json = classmethod(_version_create)
LambdaVersion.physical_resource_id = property(lambda self: self.arn)
LambdaVersion.has_cfn_attr = classmethod(lambda cls, attr: attr == "Version")
LambdaVersion.get_cfn_attribute = lambda self, attribute_name: str(self.version)


class Alias(StackOnlyResource, CloudFormationModel):
    __module__ = MODULE
    TYPE = "AWS::Lambda::Alias"
    ATTRIBUTES = ()

    def apply(self):
        alias = lambda_backends[self.account_id][self.region].create_alias(
            self.properties["Name"],
            self.properties["FunctionName"],
            str(self.properties["FunctionVersion"]),
            self.properties.get("Description", ""),
            self.properties.get("RoutingConfig"),
        )
        self.name = alias.arn


class CodeDeployApplication(StackOnlyResource, CloudFormationModel):
    __module__ = MODULE
    TYPE = "AWS::CodeDeploy::Application"
    NAME_PROPERTY = "ApplicationName"
    ATTRIBUTES = ()


class CodeDeployDeploymentGroup(StackOnlyResource, CloudFormationModel):
    __module__ = MODULE
    TYPE = "AWS::CodeDeploy::DeploymentGroup"
    NAME_PROPERTY = "DeploymentGroupName"
    ATTRIBUTES = ()


# 6. An event source mapping made or re-pointed with a qualified function
#    (an alias's ARN, as the template's lanes and queue mappings name the
#    functions' `live` alias): AWS reports the qualified ARN as its
#    FunctionArn; moto reports the ARN of the version the alias points at
#    (`…:function:<name>:1`). And ListEventSourceMappings with a FunctionName
#    keeps only the mappings created with that very text, where AWS takes a
#    name or an ARN of the same function and qualifier.
#    The patch: FunctionArn as on AWS (the function's ARN, with the
#    qualifier it was named with); the FunctionName filter compares the
#    function's name and qualifier, however either is written.
from moto.awslambda.models import LambdaBackend


def _function_and_qualifier(name_or_arn):
    """(name, qualifier or None) of a function's name, partial or full ARN."""
    tail = name_or_arn.split(":function:")[-1]
    name, _, qualifier = tail.partition(":")
    return name, (qualifier or None)


def _qualified_arn(backend, name_or_arn):
    name, qualifier = _function_and_qualifier(name_or_arn)
    arn = backend.get_function(name).function_arn
    return f"{arn}:{qualifier}" if qualifier else arn


_create_mapping = LambdaBackend.create_event_source_mapping
_update_mapping = LambdaBackend.update_event_source_mapping
_list_mappings = LambdaBackend.list_event_source_mappings


def _create_mapping_qualified(self, spec):
    esm = _create_mapping(self, spec)
    esm.function_arn = _qualified_arn(self, spec["FunctionName"])
    return esm


def _update_mapping_qualified(self, uuid, spec):
    esm = _update_mapping(self, uuid, spec)
    if esm is not None and spec.get("FunctionName"):
        esm.function_arn = _qualified_arn(self, spec["FunctionName"])
    return esm


def _list_mappings_by_function(self, event_source_arn, function_name):
    esms = _list_mappings(self, event_source_arn, None)
    if not function_name:
        return esms
    wanted = _function_and_qualifier(function_name)
    return [esm for esm in esms if _function_and_qualifier(esm.function_arn) == wanted]


LambdaBackend.create_event_source_mapping = _create_mapping_qualified
LambdaBackend.update_event_source_mapping = _update_mapping_qualified
LambdaBackend.list_event_source_mappings = _list_mappings_by_function
