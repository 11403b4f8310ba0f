//! The moto_server launcher: moto without its own delivery to functions, and with
//! a CloudFormation that creates template.yaml.

use std::path::{Path, PathBuf};

use crate::moto::find_moto_server;

use super::SuiteError;

/// moto_server without its own delivery to functions: tables and queues
/// forget the event source mappings on them, a rule's Lambda target goes to
/// the queue `lifeboat-target-<function>` the harness drains, and the names
/// CloudFormation makes up are the same for the same stack. moto would
/// invoke the functions itself, in Docker, and take the failure for
/// success; delivering to them under `cargo lambda watch` is the pumps'
/// job. Each change, with what moto does, is described in the file.
pub(super) const MOTO_DELIVERY: &str = include_str!("moto_delivery.py");

/// The queue a rule's Lambda target `function` (its name) delivers to under
/// [`MOTO_DELIVERY`].
pub fn lambda_target_queue(function: &str) -> String {
    format!("lifeboat-target-{function}")
}

/// moto_server's CloudFormation made to create template.yaml as
/// [`crate::stack`] translates it: a bus's `Ref` is its name; alarms, queue
/// policies, bus policies, `EventInvokeConfig` and the HTTP API (which
/// moto's CloudFormation skips, then fails on) are created; a parameter's
/// text becomes a number where the resource wants one; a custom resource
/// invokes nothing in Docker. Each change, with what moto does wrong, is
/// described in the file.
pub(super) const MOTO_CLOUDFORMATION: &str = include_str!("moto_cloudformation.py");

/// moto_server's own entry point, after the changes above.
const RUN_MOTO_SERVER: &str = "import sys
from moto.server import main
sys.argv[0] = \"moto_server\"
main()";

/// The Python that runs `moto_server`: its script's `#!` line, else a
/// `python3` beside it, else `python3` from PATH.
pub(crate) fn moto_python(moto_server: &Path) -> PathBuf {
    let shebang = std::fs::read_to_string(moto_server).ok().and_then(|text| {
        let first = text.lines().next()?.strip_prefix("#!")?.trim().to_owned();
        (first.contains("python") && !first.contains(' ')).then(|| PathBuf::from(first))
    });
    shebang
        .or_else(|| {
            let beside = moto_server.parent()?.join("python3");
            beside.is_file().then_some(beside)
        })
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// A word the shell reads back as `text`.
pub fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Write (atomically) an executable that runs `moto_server` as found by
/// [`find_moto_server`] with the changes described at
/// [`MOTO_DELIVERY`] and [`MOTO_CLOUDFORMATION`], for
/// [`crate::moto::MotoServer::start_program`].
pub fn moto_launcher() -> Result<PathBuf, SuiteError> {
    use std::os::unix::fs::PermissionsExt;

    let python = moto_python(&find_moto_server()?);
    let dir = crate::watch::local_dir(&crate::watch::workspace_root());
    let path = dir.join("moto-server-for-lifeboat");
    let program = format!("{MOTO_DELIVERY}\n{MOTO_CLOUDFORMATION}\n{RUN_MOTO_SERVER}\n");
    let script = format!(
        "#!/bin/sh\n# moto_server for lifeboat-local: see MOTO_DELIVERY and MOTO_CLOUDFORMATION in crates/local/src/suite/launcher.rs\nexec {} -c {} \"$@\"\n",
        shell_quoted(&python.display().to_string()),
        shell_quoted(&program)
    );
    // Unique per call: two suites started at once in one process (two tests
    // of one binary) must not rename each other's temporary file away.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let temp = dir.join(format!(
        "moto-server-for-lifeboat.{}.{}.tmp",
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&temp, script))
        .and_then(|()| std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o755)))
        .and_then(|()| std::fs::rename(&temp, &path))
        .map_err(|source| SuiteError::Launcher {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}
