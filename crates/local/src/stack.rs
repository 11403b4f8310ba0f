//! template.yaml deployed as a CloudFormation stack in moto: translated as
//! `sam deploy` would (`template/translate.py`: AWS::LanguageExtensions with
//! SAM CLI's own code, then the SAM transform), created with CloudFormation's
//! API on moto's endpoint, and read back: every resource's physical id, the
//! outputs, and the wiring the functions run on ([`wiring`]: the functions'
//! environments, the event source mappings, the rules and the queues).
//!
//! moto needs the launcher's changes to create the stack
//! ([`crate::suite::moto_launcher`], `MOTO_CLOUDFORMATION`). A custom
//! resource (the template's `CapacityCheck`) is created but never answered
//! there, so the stack stays `CREATE_IN_PROGRESS` with every resource
//! created: [`deploy`] returns then, and [`Deployed::pending`] names them.

pub mod wiring;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_cloudformation::types::{Capability, Parameter, StackStatus};
use serde_json::Value;

use crate::moto::{ACCOUNT_ID, MotoError, REGION, find_moto_server};

/// The translation program, run with the Python that runs moto_server.
pub const TRANSLATE_PY: &str = include_str!("template/translate.py");

/// How long moto may take to create the stack.
const CREATE_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error(transparent)]
    Moto(#[from] MotoError),
    #[error("cannot run {python} to translate the template: {source}")]
    Spawn {
        python: PathBuf,
        source: std::io::Error,
    },
    #[error("translating {template} failed: {detail}")]
    Translate { template: PathBuf, detail: String },
    #[error("{what}: {detail}")]
    Api { what: String, detail: String },
    #[error("stack {stack} is {status}: {reasons}")]
    Failed {
        stack: String,
        status: String,
        reasons: String,
    },
    #[error("stack {stack} was not created within {limit:?}: still {status}")]
    NotCreated {
        stack: String,
        status: String,
        limit: Duration,
    },
}

fn api_error<E: std::error::Error>(what: impl Into<String>, e: E) -> StackError {
    StackError::Api {
        what: what.into(),
        detail: aws_sdk_cloudformation::error::DisplayErrorContext(e).to_string(),
    }
}

/// `template` as CloudFormation would create it with `parameters` (names
/// of the template's parameters, and the pseudo parameters
/// `AWS::StackName`, `AWS::Region`, `AWS::AccountId`, `AWS::URLSuffix`):
/// the JSON document `template/translate.py` prints.
pub async fn translate(
    template: &Path,
    parameters: &BTreeMap<String, String>,
) -> Result<Value, StackError> {
    let python = crate::suite::moto_python(&find_moto_server()?);
    let parameters = serde_json::to_string(parameters).unwrap_or_default();
    let output = tokio::process::Command::new(&python)
        .arg("-c")
        .arg(TRANSLATE_PY)
        .arg(template)
        .arg(parameters)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|source| StackError::Spawn {
            python: python.clone(),
            source,
        })?;
    let failed = |detail: String| StackError::Translate {
        template: template.to_path_buf(),
        detail,
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(failed(format!(
            "{} ({})",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
            output.status
        )));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| failed(format!("not JSON: {e}")))
}

/// One resource of the stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackResource {
    pub resource_type: String,
    /// A name, a URL (a queue), an ARN (a topic) or an id (a mapping's
    /// UUID), as CloudFormation's `Ref` gives it.
    pub physical_id: String,
}

/// A stack as moto created it.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployed {
    pub stack_name: String,
    pub stack_id: String,
    pub status: String,
    /// Every resource by logical id.
    pub resources: BTreeMap<String, StackResource>,
    /// The stack's outputs by key.
    pub outputs: BTreeMap<String, String>,
    /// The parameters it was created with (those given; the others have
    /// the template's defaults).
    pub parameters: BTreeMap<String, String>,
    /// The document the stack was created from ([`translate`]'s).
    pub template: Value,
}

impl Deployed {
    pub fn physical_id(&self, logical_id: &str) -> Option<&str> {
        self.resources
            .get(logical_id)
            .map(|r| r.physical_id.as_str())
    }

    /// The logical ids of the resources of `resource_type`.
    pub fn of_type<'a>(&'a self, resource_type: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.resources
            .iter()
            .filter(move |(_, r)| r.resource_type == resource_type)
            .map(|(id, _)| id.as_str())
    }

    /// A resource's definition in [`Self::template`].
    pub fn definition(&self, logical_id: &str) -> Option<&Value> {
        self.template.get("Resources")?.get(logical_id)
    }

    /// Each function's binary (`Metadata.BuildProperties.Binary`, what
    /// `sam build` builds with cargo lambda), by the function's logical id.
    pub fn binaries(&self) -> BTreeMap<String, String> {
        self.of_type("AWS::Lambda::Function")
            .filter_map(|id| {
                let binary = self
                    .definition(id)?
                    .pointer("/Metadata/BuildProperties/Binary")?
                    .as_str()?;
                Some((id.to_owned(), binary.to_owned()))
            })
            .collect()
    }

    /// The custom resources CloudFormation still waits for (their function
    /// was not asked: see the module docs).
    pub fn pending(&self) -> Vec<&str> {
        if self.status != StackStatus::CreateInProgress.as_str() {
            return Vec::new();
        }
        self.resources
            .iter()
            .filter(|(_, r)| r.resource_type.starts_with("Custom::"))
            .map(|(id, _)| id.as_str())
            .collect()
    }
}

/// The document [`deploy`] creates the stack `stack_name` from:
/// `template` translated with `parameters` and the stack's name, moto's
/// region and account.
pub async fn document(
    template: &Path,
    stack_name: &str,
    parameters: &BTreeMap<String, String>,
) -> Result<Value, StackError> {
    let mut given = parameters.clone();
    for (name, value) in [
        ("AWS::StackName", stack_name),
        ("AWS::Region", REGION),
        ("AWS::AccountId", ACCOUNT_ID),
        ("AWS::URLSuffix", "amazonaws.com"),
    ] {
        given.insert(name.to_owned(), value.to_owned());
    }
    translate(template, &given).await
}

/// Translate `template` with `parameters` (see [`translate`]; the stack's
/// name, moto's region and account are added) and create it as the stack
/// `stack_name` in the moto `sdk` points at, with the same parameters.
/// Returns once every resource is created.
pub async fn deploy(
    sdk: &SdkConfig,
    stack_name: &str,
    template: &Path,
    parameters: &BTreeMap<String, String>,
) -> Result<Deployed, StackError> {
    let document = document(template, stack_name, parameters).await?;
    let cloudformation = aws_sdk_cloudformation::Client::new(sdk);
    let create = parameters.iter().fold(
        cloudformation
            .create_stack()
            .stack_name(stack_name)
            .template_body(document.to_string())
            .capabilities(Capability::CapabilityIam)
            .capabilities(Capability::CapabilityAutoExpand),
        |request, (key, value)| {
            request.parameters(
                Parameter::builder()
                    .parameter_key(key)
                    .parameter_value(value)
                    .build(),
            )
        },
    );
    let stack_id = create
        .send()
        .await
        .map_err(|e| api_error(format!("CreateStack {stack_name}"), e))?
        .stack_id
        .unwrap_or_default();
    let deadline = tokio::time::Instant::now() + CREATE_LIMIT;
    loop {
        let stack = describe(&cloudformation, stack_name)
            .await?
            .ok_or_else(|| StackError::Api {
                what: format!("DescribeStacks {stack_name}"),
                detail: format!("no such stack (created as {stack_id})"),
            })?;
        let deployed = read(&cloudformation, &stack, &document).await?;
        if created(&deployed, &document) {
            return Ok(deployed);
        }
        if StackStatus::from(deployed.status.as_str()) != StackStatus::CreateInProgress {
            return Err(StackError::Failed {
                stack: stack_name.to_owned(),
                status: deployed.status,
                reasons: failure_reasons(&cloudformation, stack_name).await,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StackError::NotCreated {
                stack: stack_name.to_owned(),
                status: deployed.status,
                limit: CREATE_LIMIT,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The stack `stack_name` as it stands in the moto `sdk` points at, or
/// `None` when there is none: what an earlier run on the same moto created
/// (its document is the template CloudFormation keeps).
pub async fn existing(sdk: &SdkConfig, stack_name: &str) -> Result<Option<Deployed>, StackError> {
    let cloudformation = aws_sdk_cloudformation::Client::new(sdk);
    let Some(stack) = describe(&cloudformation, stack_name).await? else {
        return Ok(None);
    };
    let body = cloudformation
        .get_template()
        .stack_name(stack_name)
        .send()
        .await
        .map_err(|e| api_error(format!("GetTemplate {stack_name}"), e))?
        .template_body
        .unwrap_or_default();
    let document: Value = serde_json::from_str(&body).map_err(|e| StackError::Api {
        what: format!("GetTemplate {stack_name}"),
        detail: format!("not the JSON document lifeboat-local created: {e}"),
    })?;
    let deployed = read(&cloudformation, &stack, &document).await?;
    if !created(&deployed, &document) {
        return Err(StackError::Failed {
            stack: stack_name.to_owned(),
            status: deployed.status,
            reasons: "an earlier creation did not finish: delete the stack or restart moto"
                .to_owned(),
        });
    }
    Ok(Some(deployed))
}

/// Whether every resource of the stack is created: its creation is
/// complete, or still in progress (a custom resource nobody answers here)
/// with every resource listed.
fn created(deployed: &Deployed, document: &Value) -> bool {
    match StackStatus::from(deployed.status.as_str()) {
        StackStatus::CreateComplete => true,
        StackStatus::CreateInProgress => all_listed(deployed, document),
        _ => false,
    }
}

/// Whether the stack lists every resource of the document that has no
/// condition (moto lists a resource once it is created).
fn all_listed(deployed: &Deployed, document: &Value) -> bool {
    document
        .get("Resources")
        .and_then(Value::as_object)
        .is_some_and(|resources| {
            resources
                .iter()
                .filter(|(_, r)| r.get("Condition").is_none())
                .all(|(id, _)| deployed.resources.contains_key(id))
        })
}

/// The stack `stack_name` as `DescribeStacks` has it, or `None` when there
/// is none.
async fn describe(
    cloudformation: &aws_sdk_cloudformation::Client,
    stack_name: &str,
) -> Result<Option<aws_sdk_cloudformation::types::Stack>, StackError> {
    match cloudformation
        .describe_stacks()
        .stack_name(stack_name)
        .send()
        .await
    {
        Ok(output) => Ok(output.stacks.unwrap_or_default().into_iter().next()),
        Err(e)
            if e.as_service_error().is_some_and(|s| {
                s.meta()
                    .message()
                    .is_some_and(|m| m.contains("does not exist"))
            }) =>
        {
            Ok(None)
        }
        Err(e) => Err(api_error(format!("DescribeStacks {stack_name}"), e)),
    }
}

/// The described `stack`'s status, resources, outputs and parameters.
async fn read(
    cloudformation: &aws_sdk_cloudformation::Client,
    stack: &aws_sdk_cloudformation::types::Stack,
    document: &Value,
) -> Result<Deployed, StackError> {
    let stack_name = stack.stack_name().unwrap_or_default();
    let outputs = stack
        .outputs()
        .iter()
        .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
        .collect();
    let parameters = stack
        .parameters()
        .iter()
        .filter_map(|p| {
            Some((
                p.parameter_key()?.to_owned(),
                parameter_text(p.parameter_value()?),
            ))
        })
        .collect();
    let mut resources = BTreeMap::new();
    let mut next = None;
    loop {
        let page = cloudformation
            .list_stack_resources()
            .stack_name(stack_name)
            .set_next_token(next)
            .send()
            .await
            .map_err(|e| api_error(format!("ListStackResources {stack_name}"), e))?;
        for summary in page.stack_resource_summaries() {
            resources.insert(
                summary.logical_resource_id().unwrap_or_default().to_owned(),
                StackResource {
                    resource_type: summary.resource_type().unwrap_or_default().to_owned(),
                    physical_id: summary
                        .physical_resource_id()
                        .unwrap_or_default()
                        .to_owned(),
                },
            );
        }
        next = page.next_token;
        if next.is_none() {
            break;
        }
    }
    Ok(Deployed {
        stack_name: stack_name.to_owned(),
        stack_id: stack.stack_id().unwrap_or_default().to_owned(),
        status: stack
            .stack_status()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        resources,
        outputs,
        parameters,
        template: document.clone(),
    })
}

/// A parameter's value as it was given. moto answers a
/// `CommaDelimitedList` parameter with Python's text of the list
/// (`['nordic', 'baltic']`); AWS with the text given (`nordic,baltic`).
fn parameter_text(value: &str) -> String {
    match value
        .strip_prefix("['")
        .and_then(|rest| rest.strip_suffix("']"))
    {
        Some(items) => items.split("', '").collect::<Vec<_>>().join(","),
        None => value.to_owned(),
    }
}

/// What the stack's events say went wrong, for an error message.
async fn failure_reasons(cloudformation: &aws_sdk_cloudformation::Client, stack: &str) -> String {
    let Ok(events) = cloudformation
        .describe_stack_events()
        .stack_name(stack)
        .send()
        .await
    else {
        return "(no events)".to_owned();
    };
    let reasons: Vec<String> = events
        .stack_events()
        .iter()
        .filter(|e| {
            e.resource_status()
                .is_some_and(|s| s.as_str().ends_with("FAILED"))
        })
        .map(|e| {
            format!(
                "{}: {}",
                e.logical_resource_id().unwrap_or_default(),
                e.resource_status_reason().unwrap_or_default()
            )
        })
        .collect();
    if reasons.is_empty() {
        "(no failed resource)".to_owned()
    } else {
        reasons.join("; ")
    }
}

#[cfg(test)]
mod tests;
