//! What the integration tests that drive the `lifeboat` binary against moto
//! share.

use std::path::Path;
use std::process::Output;

use lifeboat_local::moto::MotoServer;

/// `lifeboat …` against moto as an on-call shell runs it: no resource named
/// in its environment, only moto's endpoint, a region and test credentials;
/// in `dir` where given (a checkout's samconfig.toml is read from there).
/// Waited for asynchronously: moto's proxy runs on the test's runtime.
pub async fn lifeboat(moto: &MotoServer, dir: Option<&Path>, args: &[&str]) -> Output {
    lifeboat_with(moto, dir, args, &[]).await
}

/// [`lifeboat`] with `more` variables on top.
pub async fn lifeboat_with(
    moto: &MotoServer,
    dir: Option<&Path>,
    args: &[&str],
    more: &[(&str, String)],
) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_lifeboat"));
    command
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_ENDPOINT_URL", moto.endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .kill_on_drop(true);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    command.envs(more.iter().map(|(k, v)| (*k, v)));
    command.output().await.unwrap()
}
