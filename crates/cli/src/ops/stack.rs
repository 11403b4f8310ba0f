//! `--stack`: the suite's resource names read from its CloudFormation stack.
//!
//! An on-call engineer knows the stack's name, not its tables. Each resource
//! name an operator command needs is taken from, in this order:
//!
//! 1. its flag (`--breaker-table`, `--function`, …);
//! 2. the environment variable the functions read (`BREAKER_TABLE`, …);
//! 3. the stack: the one `--stack NAME` names, else the `stack_name` that
//!    `samconfig.toml` in the current directory gives `sam deploy`.
//!
//! The stack is read only when a flag or variable leaves something the
//! command needs unnamed: `DescribeStacks` (its status, outputs and
//! parameters) and `ListStackResources` (every resource's physical id by
//! its logical id, every page). What each setting takes from the stack is
//! the [`FromStack`] of its [`Setting`](super::config::Setting), all in
//! [`super::config`]; a test there checks every logical id, output and
//! parameter they name against template.yaml.
//!
//! A stack named with `--stack` that cannot be read (it does not exist, or
//! CloudFormation refused) stops the command with that error: the engineer
//! asked for it. One named only by samconfig.toml is reported where a
//! setting needed it, so a command whose flags and variables name its
//! required resources still runs (against moto, say) beside a
//! samconfig.toml that names a stack elsewhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aws_config::SdkConfig;
use aws_sdk_cloudformation::Client;
use aws_sdk_cloudformation::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_cloudformation::types::ResourceStatus;
use clap::Args;

use super::breaker::sdk_message;

/// The file `sam deploy` reads its defaults from, looked for in the current
/// directory.
pub const SAMCONFIG: &str = "samconfig.toml";

/// `--stack`, shared by the operator commands that read the suite's resources.
#[derive(Args, Debug, Clone, Default)]
pub struct StackArgs {
    /// The CloudFormation stack whose resources, outputs and parameters name
    /// what no flag or environment variable names [default: the stack_name
    /// of samconfig.toml in the current directory].
    #[arg(long, value_name = "NAME")]
    pub stack: Option<String>,
}

/// What a setting takes from the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromStack {
    /// The physical id of the resource with this logical id: a table's or a
    /// function's name, an alarm's name.
    Resource(&'static str),
    /// The value of this output.
    Output(&'static str),
    /// The value this template parameter was deployed with.
    Parameter(&'static str),
}

impl std::fmt::Display for FromStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FromStack::Resource(id) => write!(f, "resource {id}"),
            FromStack::Output(key) => write!(f, "output {key}"),
            FromStack::Parameter(key) => write!(f, "parameter {key}"),
        }
    }
}

/// A stack as CloudFormation describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackDescription {
    pub name: String,
    /// `UPDATE_COMPLETE`, `ROLLBACK_COMPLETE`, …: shown beside a missing
    /// resource, which a failed deploy explains.
    pub status: String,
    /// Physical id by logical id, deleted resources left out.
    pub resources: BTreeMap<String, String>,
    pub outputs: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
}

impl StackDescription {
    /// What the stack says of `from`, or why it says nothing.
    pub fn value(&self, from: FromStack) -> Result<&str, String> {
        let found = match from {
            FromStack::Resource(id) => self.resources.get(id),
            FromStack::Output(key) => self.outputs.get(key),
            FromStack::Parameter(key) => self.parameters.get(key),
        };
        found
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("stack {} ({}) has no {from}", self.name, self.status))
    }
}

/// The stack a command takes what flags and variables leave unnamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stack {
    /// Neither `--stack` nor samconfig.toml names one; why not.
    Unnamed {
        why: String,
    },
    /// Named, but not read: flags and variables named everything.
    Unread {
        name: String,
    },
    Read(StackDescription),
    /// Named by samconfig.toml only, and it could not be read.
    Unreadable(StackError),
}

/// The stack could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    #[error(
        "stack {stack} does not exist in {region}{hint}: check the name, the region \
         (AWS_REGION or the profile's) and the account your credentials are for"
    )]
    NotFound {
        stack: String,
        region: String,
        /// Where samconfig.toml deploys it, when that is another region.
        hint: String,
    },
    #[error("stack {stack}: {call}: {message}")]
    Aws {
        stack: String,
        call: &'static str,
        message: String,
    },
}

/// Where the stack's name came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackSource {
    Flag,
    /// samconfig.toml, with the region it deploys to if it says.
    Samconfig {
        path: PathBuf,
        region: Option<String>,
    },
}

/// A stack to read, and who named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackName {
    pub name: String,
    pub source: StackSource,
}

/// The stack `--stack` names, else the one samconfig.toml in `dir` gives
/// `sam deploy`; `Err` says why there is none.
pub fn name_stack(flag: Option<&str>, dir: &Path) -> Result<StackName, String> {
    if let Some(name) = flag.map(str::trim).filter(|n| !n.is_empty()) {
        return Ok(StackName {
            name: name.to_owned(),
            source: StackSource::Flag,
        });
    }
    let path = dir.join(SAMCONFIG);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "no --stack given and no {SAMCONFIG} in the current directory"
            ));
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let config = parse_samconfig(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    match config.stack_name {
        Some(name) => Ok(StackName {
            name,
            source: StackSource::Samconfig {
                path,
                region: config.region,
            },
        }),
        None => Err(format!(
            "no --stack given and {} names no stack_name",
            path.display()
        )),
    }
}

/// The stack for a command: read only if `needed` (flags and variables
/// leave something unnamed). A stack `--stack` names that cannot be read
/// is an error; one samconfig.toml names is [`Stack::Unreadable`].
pub async fn find(
    flag: Option<&str>,
    needed: bool,
    dir: &Path,
    sdk: &SdkConfig,
) -> Result<Stack, StackError> {
    let named = match name_stack(flag, dir) {
        Ok(named) => named,
        Err(why) => return Ok(Stack::Unnamed { why }),
    };
    if !needed {
        return Ok(Stack::Unread { name: named.name });
    }
    match describe(&Client::new(sdk), &named).await {
        Ok(stack) => Ok(Stack::Read(stack)),
        Err(e) if named.source == StackSource::Flag => Err(e),
        Err(e) => Ok(Stack::Unreadable(e)),
    }
}

/// `DescribeStacks` and `ListStackResources` (every page) of `stack`.
pub async fn describe(client: &Client, stack: &StackName) -> Result<StackDescription, StackError> {
    let region = client.config().region().map(ToString::to_string);
    let not_found = || StackError::NotFound {
        stack: stack.name.clone(),
        region: region
            .clone()
            .unwrap_or_else(|| "no region (set AWS_REGION)".to_owned()),
        hint: match &stack.source {
            StackSource::Samconfig {
                region: Some(deployed),
                path,
            } if region.as_deref() != Some(deployed.as_str()) => {
                format!(" ({} deploys it to {deployed})", path.display())
            }
            _ => String::new(),
        },
    };
    let failed = |call: &'static str, message: String| StackError::Aws {
        stack: stack.name.clone(),
        call,
        message,
    };
    let described = client
        .describe_stacks()
        .stack_name(&stack.name)
        .send()
        .await
        .map_err(|e| {
            if is_not_found(&e) {
                not_found()
            } else {
                failed("DescribeStacks", sdk_message(&e))
            }
        })?;
    let Some(found) = described.stacks().first() else {
        return Err(not_found());
    };
    let mut description = StackDescription {
        name: found.stack_name().unwrap_or(&stack.name).to_owned(),
        status: found
            .stack_status()
            .map_or_else(|| "status unknown".to_owned(), |s| s.as_str().to_owned()),
        resources: BTreeMap::new(),
        outputs: found
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
            .collect(),
        parameters: found
            .parameters()
            .iter()
            .filter_map(|p| {
                Some((
                    p.parameter_key()?.to_owned(),
                    p.parameter_value()?.to_owned(),
                ))
            })
            .collect(),
    };
    let mut token: Option<String> = None;
    loop {
        let page = client
            .list_stack_resources()
            .stack_name(&description.name)
            .set_next_token(token.take())
            .send()
            .await
            .map_err(|e| failed("ListStackResources", sdk_message(&e)))?;
        for resource in page.stack_resource_summaries() {
            if resource.resource_status() == Some(&ResourceStatus::DeleteComplete) {
                continue;
            }
            if let (Some(logical), Some(physical)) = (
                resource.logical_resource_id(),
                resource.physical_resource_id(),
            ) {
                description
                    .resources
                    .insert(logical.to_owned(), physical.to_owned());
            }
        }
        match page.next_token() {
            Some(next) if !next.is_empty() => token = Some(next.to_owned()),
            _ => break,
        }
    }
    Ok(description)
}

/// CloudFormation answers a stack it does not have with `ValidationError`,
/// "Stack with id NAME does not exist".
fn is_not_found<E, R>(err: &SdkError<E, R>) -> bool
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            e.code() == Some("ValidationError")
                && e.message().is_some_and(|m| m.contains("does not exist"))
        }
        _ => false,
    }
}

/// What lifeboat reads of samconfig.toml: the stack `sam deploy` deploys
/// and its region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Samconfig {
    pub stack_name: Option<String>,
    pub region: Option<String>,
}

/// The tables `sam deploy` reads its parameters from, most specific
/// first: a command's own parameters win over the global ones.
const SAMCONFIG_TABLES: [&str; 2] = ["default.deploy.parameters", "default.global.parameters"];

/// `stack_name` and `region` of the `default` environment, read the way
/// `sam deploy` reads them (`[default.deploy.parameters]` over
/// `[default.global.parameters]`).
///
/// Not a whole TOML parser (the workspace has none at run time, and the
/// operators' build takes no new one for two keys): table headers,
/// `key = value` lines with bare, quoted or dotted keys, comments, and
/// values spanning lines (multi-line strings, arrays) skipped over. The two
/// keys must be one-line basic (`"…"`) or literal (`'…'`) strings; anything
/// else there is an error naming the line, never a guess.
pub fn parse_samconfig(text: &str) -> Result<Samconfig, String> {
    let mut values: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut table: Vec<String> = Vec::new();
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    while let Some((number, raw)) = lines.next() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with("[[") {
            // An array of tables: nothing lifeboat reads.
            table = vec!["[[array]]".to_owned()];
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let end = header
                .find(']')
                .ok_or_else(|| format!("line {number}: table header without ']'"))?;
            table = split_key(&header[..end]).map_err(|e| format!("line {number}: {e}"))?;
            continue;
        }
        let (key, value) =
            split_assignment(line).ok_or_else(|| format!("line {number}: expected key = value"))?;
        let mut path = table.clone();
        path.extend(split_key(key).map_err(|e| format!("line {number}: {e}"))?);
        let path = path.join(".");
        let wanted = SAMCONFIG_TABLES
            .iter()
            .any(|t| path == format!("{t}.stack_name") || path == format!("{t}.region"));
        if wanted {
            let value =
                one_line_string(value).map_err(|why| format!("line {number}: {path} {why}"))?;
            if values.insert(path.clone(), (number, value)).is_some() {
                return Err(format!("line {number}: {path} is given twice"));
            }
        } else {
            skip_value(value, &mut lines).map_err(|e| format!("line {number}: {e}"))?;
        }
    }
    let pick = |key: &str| {
        SAMCONFIG_TABLES
            .iter()
            .find_map(|t| values.get(&format!("{t}.{key}")))
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    Ok(Samconfig {
        stack_name: pick("stack_name"),
        region: pick("region"),
    })
}

/// `key = value` at the first `=` outside a quoted key.
fn split_assignment(line: &str) -> Option<(&str, &str)> {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '=') => return Some((line[..i].trim(), line[i + 1..].trim())),
            _ => {}
        }
    }
    None
}

/// A dotted key's parts: `default.global."parameters"` is three.
fn split_key(key: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut rest = key.trim();
    loop {
        let (part, after) = if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').ok_or("unclosed quoted key")?;
            (quoted[..end].to_owned(), &quoted[end + 1..])
        } else if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'').ok_or("unclosed quoted key")?;
            (quoted[..end].to_owned(), &quoted[end + 1..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            let bare = rest[..end].trim();
            if bare.is_empty()
                || !bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(format!("{key:?} is not a key"));
            }
            (bare.to_owned(), &rest[end..])
        };
        parts.push(part);
        let after = after.trim_start();
        match after.strip_prefix('.') {
            Some(next) => rest = next.trim_start(),
            None if after.is_empty() => return Ok(parts),
            None => return Err(format!("{key:?} is not a key")),
        }
    }
}

/// A one-line basic or literal string, then nothing but a comment.
fn one_line_string(value: &str) -> Result<String, String> {
    let (text, rest) = if value.starts_with("\"\"\"") || value.starts_with("'''") {
        return Err("is a multi-line string: give it on one line".to_owned());
    } else if let Some(literal) = value.strip_prefix('\'') {
        let end = literal.find('\'').ok_or("is an unclosed string")?;
        (literal[..end].to_owned(), &literal[end + 1..])
    } else if let Some(basic) = value.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = basic.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    end = Some(i + 1);
                    break;
                }
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('t') => out.push('\t'),
                    Some('n') => out.push('\n'),
                    Some(other) => {
                        return Err(format!("has an escape \\{other} lifeboat does not read"));
                    }
                    None => return Err("is an unclosed string".to_owned()),
                },
                c => out.push(c),
            }
        }
        let end = end.ok_or("is an unclosed string")?;
        (out, &basic[end..])
    } else {
        return Err("is not a string".to_owned());
    };
    let rest = rest.trim();
    if rest.is_empty() || rest.starts_with('#') {
        Ok(text)
    } else {
        Err(format!("has {rest:?} after its string"))
    }
}

/// Skip a value lifeboat does not read, with the lines it spans: a
/// multi-line string up to its closing quotes, an array or inline table up
/// to its closing bracket.
fn skip_value<'a>(
    value: &str,
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
) -> Result<(), String> {
    for quotes in ["\"\"\"", "'''"] {
        if let Some(after) = value.strip_prefix(quotes) {
            if after.contains(quotes) {
                return Ok(());
            }
            for (_, line) in lines.by_ref() {
                if line.contains(quotes) {
                    return Ok(());
                }
            }
            return Err("multi-line string never closed".to_owned());
        }
    }
    let mut depth = bracket_depth(value, 0);
    while depth > 0 {
        let (_, line) = lines.next().ok_or("array or inline table never closed")?;
        depth = bracket_depth(line, depth);
    }
    Ok(())
}

/// `depth` after the brackets and braces of `text` outside strings and
/// comments.
fn bracket_depth(text: &str, mut depth: i32) -> i32 {
    let mut quote = None;
    let mut escaped = false;
    for c in text.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '#' => break,
                '[' | '{' => depth += 1,
                ']' | '}' => depth -= 1,
                _ => {}
            },
        }
    }
    depth
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_samconfig_names_the_stack_and_region() {
        let text = include_str!("../../../../samconfig.toml");
        assert_eq!(
            parse_samconfig(text).unwrap(),
            Samconfig {
                stack_name: Some("lifeboat".into()),
                region: Some("us-east-1".into()),
            }
        );
    }

    #[test]
    fn deploy_parameters_win_over_global_ones() {
        let text = r#"
version = 0.1
[default.global.parameters]
stack_name = "from-global"   # a comment
region = 'eu-west-1'

[default.deploy.parameters]
stack_name = "from-deploy"
parameter_overrides = [
  "Operators=nordic,baltic",
  "AlarmOperators=a=b",
]
tags = """
stack_name = "not this"
"""
[prod.deploy.parameters]
stack_name = "prod"
"#;
        assert_eq!(
            parse_samconfig(text).unwrap(),
            Samconfig {
                stack_name: Some("from-deploy".into()),
                region: Some("eu-west-1".into()),
            }
        );
    }

    #[test]
    fn dotted_and_quoted_keys_are_read() {
        let text = "default.global.parameters.stack_name = \"dotted\"\n";
        assert_eq!(
            parse_samconfig(text).unwrap().stack_name.as_deref(),
            Some("dotted")
        );
        let text =
            "[ default . \"global\" . parameters ]\n\"stack_name\" = \"a \\\"quoted\\\" name\"\n";
        assert_eq!(
            parse_samconfig(text).unwrap().stack_name.as_deref(),
            Some("a \"quoted\" name")
        );
        // Other environments and other commands are not the default deploy.
        let text = "[prod.global.parameters]\nstack_name = \"prod\"\n[default.build.parameters]\nstack_name = \"x\"\n";
        assert_eq!(parse_samconfig(text).unwrap(), Samconfig::default());
        assert_eq!(parse_samconfig("").unwrap(), Samconfig::default());
    }

    #[test]
    fn what_is_not_a_plain_string_is_an_error_naming_the_line() {
        for (text, expected) in [
            (
                "[default.global.parameters]\nstack_name = 5\n",
                "line 2: default.global.parameters.stack_name is not a string",
            ),
            (
                "[default.global.parameters]\n\nstack_name = \"open\n",
                "line 3: default.global.parameters.stack_name is an unclosed string",
            ),
            (
                "[default.global.parameters]\nstack_name = \"a\" \"b\"\n",
                "line 2: default.global.parameters.stack_name has \"\\\"b\\\"\" after its string",
            ),
            (
                "[default.global.parameters]\nstack_name = \"a\"\nstack_name = \"b\"\n",
                "line 3: default.global.parameters.stack_name is given twice",
            ),
            (
                "[default.global.parameters\n",
                "line 1: table header without ']'",
            ),
            ("just words\n", "line 1: expected key = value"),
            ("x = [1,\n2\n", "line 1: array or inline table never closed"),
        ] {
            assert_eq!(parse_samconfig(text).unwrap_err(), expected, "{text:?}");
        }
    }

    #[test]
    fn the_flag_wins_over_samconfig_and_no_name_says_why() {
        let dir = std::env::temp_dir().join(format!("lifeboat-stack-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(SAMCONFIG);
        let _ = std::fs::remove_file(&path);
        let err = name_stack(None, &dir).unwrap_err();
        assert_eq!(
            err,
            "no --stack given and no samconfig.toml in the current directory"
        );
        assert_eq!(
            name_stack(Some(" flagged "), &dir).unwrap(),
            StackName {
                name: "flagged".into(),
                source: StackSource::Flag
            }
        );
        std::fs::write(
            &path,
            "[default.global.parameters]\nregion = \"us-east-1\"\n",
        )
        .unwrap();
        let err = name_stack(Some(""), &dir).unwrap_err();
        assert!(err.ends_with("samconfig.toml names no stack_name"), "{err}");
        std::fs::write(
            &path,
            "[default.global.parameters]\nstack_name = \"lifeboat\"\nregion = \"us-east-1\"\n",
        )
        .unwrap();
        assert_eq!(
            name_stack(None, &dir).unwrap(),
            StackName {
                name: "lifeboat".into(),
                source: StackSource::Samconfig {
                    path: path.clone(),
                    region: Some("us-east-1".into())
                }
            }
        );
        std::fs::write(&path, "[default.global.parameters]\nstack_name = 1\n").unwrap();
        let err = name_stack(None, &dir).unwrap_err();
        assert!(
            err.ends_with("line 2: default.global.parameters.stack_name is not a string"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_value_names_the_stack_its_status_and_what_is_missing() {
        let stack = StackDescription {
            name: "lifeboat".into(),
            status: "ROLLBACK_COMPLETE".into(),
            resources: [(
                "BreakerTable".to_owned(),
                "lifeboat-BreakerTable-1".to_owned(),
            )]
            .into(),
            outputs: [(
                "RequestsTablePrefix".to_owned(),
                "lifeboat.requests.".to_owned(),
            )]
            .into(),
            parameters: [("AlarmOperators".to_owned(), " ".to_owned())].into(),
        };
        assert_eq!(
            stack.value(FromStack::Resource("BreakerTable")),
            Ok("lifeboat-BreakerTable-1")
        );
        assert_eq!(
            stack.value(FromStack::Output("RequestsTablePrefix")),
            Ok("lifeboat.requests.")
        );
        assert_eq!(
            stack.value(FromStack::Resource("CartsTable")),
            Err("stack lifeboat (ROLLBACK_COMPLETE) has no resource CartsTable".into())
        );
        assert_eq!(
            stack.value(FromStack::Parameter("AlarmOperators")),
            Err("stack lifeboat (ROLLBACK_COMPLETE) has no parameter AlarmOperators".into())
        );
    }
}
