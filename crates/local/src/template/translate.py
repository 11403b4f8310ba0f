"""template.yaml as CloudFormation would deploy it, for lifeboat-local.

    python translate.py TEMPLATE PARAMETERS_JSON

PARAMETERS_JSON is an object of parameter overrides (strings), plus the
pseudo parameters AWS::StackName, AWS::Region and AWS::AccountId. Prints the
CloudFormation JSON the deploy would create: the AWS::LanguageExtensions
transform expanded by SAM CLI's own implementation of it (as `sam build` and
`sam validate` run it), then the SAM transform (samtranslator). Embedded in
lifeboat-local (crates/local/src/stack.rs) and run with the Python that runs
moto_server, which must have aws-sam-cli (the pinned .venv has it).

Two changes, each because the deploy target here is moto, not AWS:

- Every function's code is an inline placeholder (`Code: ZipFile`): moto
  stores code without running it (the functions run under cargo lambda
  watch), and a `CodeUri` of `.` names nothing moto could fetch (the SAM
  transform is given an S3 location, as after `sam package`, first). The
  function's binary stays in the output as `Metadata.BuildProperties.Binary`
  (samtranslator copies a function's Metadata onto its AWS::Lambda::Function).
- SAM CLI's expansion resolves every `Fn::Sub` it can, and one whose string
  still names a resource (`${RealConsumerErrorsAlarm}`, `${LifeboatHttpApi}`)
  comes out as a plain string with the placeholder in it and the escapes
  (`${!Literal}`) already taken out. CloudFormation would substitute it:
  such strings are put back into an `Fn::Sub`, escapes restored.
"""

import copy
import json
import re
import sys

from boto3.session import Session
from cfnlint.decode import decode
from samcli.lib.cfn_language_extensions.sam_integration import expand_language_extensions
from samcli.lib.intrinsic_resolver.intrinsics_symbol_table import IntrinsicsSymbolTable
from samtranslator.metrics.metrics import Metrics
from samtranslator.parser import parser
from samtranslator.translator.translator import Translator

PSEUDO = ("AWS::StackName", "AWS::Region", "AWS::AccountId", "AWS::Partition", "AWS::URLSuffix")
# What SAM attaches to every function's role: the translation asks for its
# ARN and no IAM call is made for it.
MANAGED_POLICIES = {
    "AWSLambdaBasicExecutionRole": "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
}
PACKAGED_CODE = "s3://lifeboat-artifacts/functions.zip"
PLACEHOLDER_CODE = "lifeboat-local: this function runs under cargo lambda watch, not in moto"
PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")


def fail(message):
    print(f"translate.py: {message}", file=sys.stderr)
    sys.exit(1)


def resubstitute(node, resources):
    """Put strings that still name a resource back into an Fn::Sub."""
    if isinstance(node, dict):
        return {k: resubstitute(v, resources) for k, v in node.items()}
    if isinstance(node, list):
        return [resubstitute(v, resources) for v in node]
    if not isinstance(node, str):
        return node
    names = [m.group(1) for m in PLACEHOLDER.finditer(node)]
    if not any(n.split(".")[0] in resources for n in names):
        return node

    def keep(match):
        name = match.group(1)
        return match.group(0) if name.split(".")[0] in resources else "${!" + name + "}"

    return {"Fn::Sub": PLACEHOLDER.sub(keep, node)}


def main():
    if len(sys.argv) != 3:
        fail("usage: translate.py TEMPLATE PARAMETERS_JSON")
    path, given = sys.argv[1], json.loads(sys.argv[2])
    template, problems = decode(path)
    if problems:
        fail(f"{path} does not load: {problems}")
    specs = template.get("Parameters", {})
    unknown = sorted(k for k in given if k not in specs and k not in PSEUDO)
    if unknown:
        fail(f"{path} has no parameters {unknown}")
    # CloudFormation hands every parameter over as a string.
    parameters = {name: str(spec.get("Default", "")) for name, spec in specs.items()}
    parameters.update({k: str(v) for k, v in given.items() if k not in PSEUDO})
    symbols = dict(IntrinsicsSymbolTable.DEFAULT_PSEUDO_PARAM_VALUES)
    symbols.update({k: str(v) for k, v in given.items() if k in PSEUDO})
    symbols.update(parameters)

    expanded = expand_language_extensions(copy.deepcopy(template), parameter_values=symbols, enabled=True)
    document = expanded.expanded_template if expanded.had_language_extensions else copy.deepcopy(template)
    # What `sam deploy` uploads in place of the local code; replaced below.
    document.setdefault("Globals", {}).setdefault("Function", {})["CodeUri"] = PACKAGED_CODE
    for resource in document.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Serverless::Function" and "CodeUri" in resource.get("Properties", {}):
            resource["Properties"]["CodeUri"] = PACKAGED_CODE
    resources = set(document.get("Resources", {}))
    for section in ("Resources", "Outputs"):
        if section in document:
            document[section] = resubstitute(document[section], resources)

    metrics = Metrics()
    translator = Translator(
        managed_policy_map=None,
        sam_parser=parser.Parser(),
        plugins=[],
        boto_session=Session(region_name=symbols["AWS::Region"]),
        metrics=metrics,
    )
    try:
        deployed = translator.translate(
            sam_template=document,
            parameter_values=parameters,
            get_managed_policy_map=lambda: MANAGED_POLICIES,
        )
    except Exception as e:  # the transform's refusal is the answer
        fail(f"the SAM transform refuses {path}: {e}")
    finally:
        metrics.publish()

    for resource in deployed.get("Resources", {}).values():
        if resource.get("Type") == "AWS::Lambda::Function":
            resource["Properties"]["Code"] = {"ZipFile": PLACEHOLDER_CODE}
    json.dump(deployed, sys.stdout, indent=1, sort_keys=True)
    print()


main()
